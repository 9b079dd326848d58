import { Badge } from "@chakra-ui/react";

import type { JobState } from "../types";

/** The colour of each job state, in the palette of Airflow's own task states. */
export const STATE_COLORS: Record<JobState, string> = {
  Created: "gray",
  Pending: "yellow",
  Running: "cyan",
  Restarting: "orange",
  Suspended: "purple",
  Succeeded: "green",
  Failed: "red",
  Unknown: "gray",
};

export function StateBadge({ state }: { state: JobState }) {
  return (
    <Badge colorPalette={STATE_COLORS[state] ?? "gray"} data-testid="job-state" size="lg" variant="solid">
      {state}
    </Badge>
  );
}
