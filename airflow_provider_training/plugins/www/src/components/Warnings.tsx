import { Alert, Stack } from "@chakra-ui/react";

import type { StuckWarning } from "../types";

/** One alert per stuck pod (Unschedulable, ImagePullBackOff / ErrImagePull, CrashLoopBackOff). */
export function Warnings({ warnings }: { warnings: StuckWarning[] }) {
  if (warnings.length === 0) return null;
  return (
    <Stack gap={2} aria-label="Stuck pods">
      {warnings.map((w) => (
        <Alert.Root key={`${w.pod}-${w.reason}`} status="warning" role="alert">
          <Alert.Indicator />
          <Alert.Content>
            <Alert.Title>
              {w.pod} is stuck: {w.reason}
            </Alert.Title>
            {w.message ? <Alert.Description>{w.message}</Alert.Description> : null}
          </Alert.Content>
        </Alert.Root>
      ))}
    </Stack>
  );
}
