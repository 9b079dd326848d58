import { Table } from "@chakra-ui/react";

import type { ReplicaRow } from "../types";

export function ReplicaTable({ replicas }: { replicas: ReplicaRow[] }) {
  return (
    <Table.Root size="sm" variant="outline" aria-label="Replicas">
      <Table.Header>
        <Table.Row>
          <Table.ColumnHeader>Replica type</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Expected</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Active</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Succeeded</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Failed</Table.ColumnHeader>
        </Table.Row>
      </Table.Header>
      <Table.Body>
        {replicas.map((r) => (
          <Table.Row key={r.type}>
            <Table.Cell>{r.type}</Table.Cell>
            <Table.Cell textAlign="end">{r.expected ?? "?"}</Table.Cell>
            <Table.Cell textAlign="end">{r.active}</Table.Cell>
            <Table.Cell textAlign="end">{r.succeeded}</Table.Cell>
            <Table.Cell color={r.failed > 0 ? "fg.error" : undefined} textAlign="end">
              {r.failed}
            </Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}
