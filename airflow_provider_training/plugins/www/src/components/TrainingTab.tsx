import { Alert, Box, Spinner, Text } from "@chakra-ui/react";

import { describeError } from "../api";
import { useJob } from "../hooks/useJob";
import type { TaskInstanceKey } from "../types";
import { JobView } from "./JobView";
import { ViewMessage } from "./ViewMessage";

/** The tab's content for one task instance: what `/training/api/job` says, refreshed until finished. */
export function TrainingTab(task: TaskInstanceKey) {
  const { data, error, refreshing } = useJob(task);

  return (
    <Box data-testid="training-tab" data-refreshing={refreshing} p={4}>
      {error ? (
        <Alert.Root status="error" mb={4} data-testid="request-error">
          <Alert.Indicator />
          <Alert.Content>
            <Alert.Title>{describeError(error)}</Alert.Title>
          </Alert.Content>
        </Alert.Root>
      ) : null}
      {data === null ? (
        error ? null : (
          <Text color="fg.muted">
            <Spinner size="sm" mr={2} />
            Loading the training job…
          </Text>
        )
      ) : data.view === "job" ? (
        <JobView data={data} task={task} />
      ) : (
        <ViewMessage data={{ ...data, view: data.view }} />
      )}
    </Box>
  );
}
