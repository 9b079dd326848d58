import { Box, HStack, NativeSelect, Text } from "@chakra-ui/react";
import { useEffect, useState } from "react";

import { describeError } from "../api";
import { type FollowState, useLogFollow } from "../hooks/useLogFollow";
import type { LogSource, TaskInstanceKey } from "../types";

const STATE_TEXT: Record<FollowState, string> = {
  loading: "Loading…",
  live: "Following live",
  reconnecting: "Connection lost: reconnecting…",
  ended: "The container has terminated: all lines shown",
  saved: "Saved lines",
  error: "Could not read the logs",
};

/** Pick a replica, see its last lines, then follow it live. */
export function LogViewer({ task, sources }: { task: TaskInstanceKey; sources: LogSource[] }) {
  const [replica, setReplica] = useState<string | null>(sources[0]?.replica ?? null);
  // A replica that appears later (pods created after the first answer) becomes the default.
  useEffect(() => {
    if (replica === null && sources.length > 0) setReplica(sources[0].replica);
  }, [replica, sources]);
  const follow = useLogFollow(task, replica);
  const saved = sources.some((s) => s.replica === replica && !s.live);

  if (sources.length === 0) return <Text color="fg.muted">No replica logs yet.</Text>;
  return (
    <Box>
      <HStack gap={3} mb={2}>
        <NativeSelect.Root size="sm" width="16em">
          <NativeSelect.Field
            aria-label="Replica"
            value={replica ?? ""}
            onChange={(e) => setReplica(e.currentTarget.value)}
          >
            {sources.map((s) => (
              <option key={s.replica} value={s.replica}>
                {s.replica}
                {s.live ? "" : " (saved)"}
              </option>
            ))}
          </NativeSelect.Field>
          <NativeSelect.Indicator />
        </NativeSelect.Root>
        <Text data-testid="log-state" data-state={follow.state} color="fg.muted" fontSize="sm">
          {STATE_TEXT[follow.state]}
          {follow.note ? ` (${follow.note})` : ""}
        </Text>
      </HStack>
      {follow.state === "error" ? (
        <Text color="fg.error" role="alert">
          {describeError(follow.error, saved ? "task logs and XComs" : "task logs")}
        </Text>
      ) : null}
      <Box
        aria-label={`Logs of ${replica ?? ""}`}
        as="pre"
        bg="bg.muted"
        borderRadius="md"
        fontFamily="mono"
        fontSize="sm"
        maxH="32em"
        overflow="auto"
        p={2}
        role="log"
        whiteSpace="pre-wrap"
      >
        {follow.lines.map((line, index) => (
          <div key={index} data-testid="log-line">
            {line.text}
          </div>
        ))}
      </Box>
    </Box>
  );
}
