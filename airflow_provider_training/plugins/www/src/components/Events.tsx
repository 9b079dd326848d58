import { Table, Text } from "@chakra-ui/react";

import { age } from "../time";
import type { JobEvent } from "../types";

/** The job's and its pods' Kubernetes events, newest first (the server's order). */
export function Events({ events, now }: { events: JobEvent[]; now?: number }) {
  if (events.length === 0) return <Text color="fg.muted">No events.</Text>;
  return (
    <Table.Root size="sm" variant="outline" aria-label="Events">
      <Table.Header>
        <Table.Row>
          <Table.ColumnHeader>Type</Table.ColumnHeader>
          <Table.ColumnHeader>Reason</Table.ColumnHeader>
          <Table.ColumnHeader>Object</Table.ColumnHeader>
          <Table.ColumnHeader>Message</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Count</Table.ColumnHeader>
          <Table.ColumnHeader textAlign="end">Last seen</Table.ColumnHeader>
        </Table.Row>
      </Table.Header>
      <Table.Body>
        {events.map((e, index) => (
          <Table.Row key={`${e.object ?? ""}-${e.reason ?? ""}-${e.last_time ?? ""}-${index}`}>
            <Table.Cell color={e.type === "Warning" ? "fg.warning" : undefined}>{e.type}</Table.Cell>
            <Table.Cell>{e.reason ?? ""}</Table.Cell>
            <Table.Cell fontFamily="mono" whiteSpace="nowrap">
              {e.object ?? ""}
            </Table.Cell>
            <Table.Cell>{e.message ?? ""}</Table.Cell>
            <Table.Cell textAlign="end">{e.count ?? 1}</Table.Cell>
            <Table.Cell textAlign="end">{age(e.last_time, now)}</Table.Cell>
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}
