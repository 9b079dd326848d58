import { Alert } from "@chakra-ui/react";

import type { JobResponse, View } from "../types";

type MessageView = Exclude<View, "job">;

const TITLES: Record<MessageView, string> = {
  not_training: "This task is not a training task.",
  not_submitted: "No training job has been submitted for this try yet.",
  deleted: "The training job was deleted from the cluster.",
  cluster_error: "The Kubernetes cluster could not be read.",
};

const STATUS: Record<MessageView, "info" | "warning" | "error"> = {
  not_training: "info",
  not_submitted: "info",
  deleted: "warning",
  cluster_error: "error",
};

/** What the tab says instead of a job: one plain sentence, and the server's `detail`. */
export function ViewMessage({ data }: { data: JobResponse & { view: MessageView } }) {
  return (
    <Alert.Root status={STATUS[data.view]} data-testid={`view-${data.view}`}>
      <Alert.Indicator />
      <Alert.Content>
        <Alert.Title>{TITLES[data.view]}</Alert.Title>
        {data.detail ? <Alert.Description>{data.detail}</Alert.Description> : null}
      </Alert.Content>
    </Alert.Root>
  );
}
