/**
 * The Training tab of Airflow's task-instance page: the react app of the provider's plugin, built as a UMD
 * library (`AirflowPlugin`) that uses the host's React and Chakra UI from `globalThis`.
 */
import { ChakraProvider, defaultSystem } from "@chakra-ui/react";

import { TrainingTab } from "./components/TrainingTab";
import type { TaskInstanceKey } from "./types";

export type TrainingPluginProps = TaskInstanceKey;

/** The component the host renders with the task instance's `{dagId, runId, taskId, mapIndex}`. */
export default function TrainingPlugin(props: TrainingPluginProps) {
  // The host's theme (light and dark) when it shares one; Chakra's default when run on its own.
  const system = globalThis.ChakraUISystem ?? defaultSystem;
  return (
    <ChakraProvider value={system}>
      <TrainingTab dagId={props.dagId} mapIndex={props.mapIndex} runId={props.runId} taskId={props.taskId} />
    </ChakraProvider>
  );
}
