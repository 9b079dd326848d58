import { Table, Text } from "@chakra-ui/react";

import { age } from "../time";
import type { Pod } from "../types";

function lastExit(pod: Pod): string {
  const parts = [pod.exit_code === null ? "" : String(pod.exit_code), pod.reason ?? ""].filter(Boolean);
  return parts.join(" ");
}

export function PodTable({ pods, now }: { pods: Pod[]; now?: number }) {
  if (pods.length === 0) return <Text color="fg.muted">No pods.</Text>;
  return (
    <Table.Root size="sm" variant="outline" aria-label="Pods">
      <Table.Header>
        <Table.Row>
          <Table.ColumnHeader>Replica</Table.ColumnHeader>
          <Table.ColumnHeader>Pod</Table.ColumnHeader>
          <Table.ColumnHeader>Phase</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Restarts</Table.ColumnHeader>
          <Table.ColumnHeader>Last exit</Table.ColumnHeader>
          <Table.ColumnHeader>Node</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Age</Table.ColumnHeader>
        </Table.Row>
      </Table.Header>
      <Table.Body>
        {pods.map((pod) => (
          <Table.Row key={pod.name} data-testid={`pod-${pod.replica ?? pod.name}`}>
            <Table.Cell>{pod.replica ?? ""}</Table.Cell>
            <Table.Cell fontFamily="mono" whiteSpace="nowrap">
              {pod.name}
            </Table.Cell>
            <Table.Cell color={pod.warning ? "fg.warning" : undefined} title={pod.message ?? undefined}>
              {pod.phase ?? "?"}
              {pod.warning ? ` (${pod.warning})` : ""}
            </Table.Cell>
            <Table.Cell textAlign="end">{pod.restarts ?? 0}</Table.Cell>
            <Table.Cell>{lastExit(pod)}</Table.Cell>
            <Table.Cell>{pod.node ?? ""}</Table.Cell>
            <Table.Cell textAlign="end">{age(pod.created, now)}</Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}
