import { Badge, HStack, List, Text } from "@chakra-ui/react";

import { localTime } from "../time";
import type { Condition } from "../types";

/** The job's conditions in the order of their last transition: the timeline of the job. */
export function Conditions({ conditions }: { conditions: Condition[] }) {
  if (conditions.length === 0) return <Text color="fg.muted">No conditions yet.</Text>;
  const ordered = [...conditions].sort((a, b) =>
    (a.last_transition_time ?? "").localeCompare(b.last_transition_time ?? ""),
  );
  return (
    <List.Root as="ol" gap={1} variant="plain" aria-label="Conditions">
      {ordered.map((c) => (
        <List.Item key={`${c.type}-${c.last_transition_time ?? ""}`}>
          <HStack gap={2} wrap="wrap">
            <Text color="fg.muted" fontSize="sm" minW="11em">
              {localTime(c.last_transition_time)}
            </Text>
            <Badge colorPalette={c.status === "True" ? "blue" : "gray"} variant="subtle">
              {c.type}={c.status}
            </Badge>
            {c.reason ? <Text fontWeight="semibold">{c.reason}</Text> : null}
            {c.message ? <Text>{c.message}</Text> : null}
          </HStack>
        </List.Item>
      ))}
    </List.Root>
  );
}
