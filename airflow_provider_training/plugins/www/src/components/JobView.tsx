import { Heading, HStack, Link, Stack, Text } from "@chakra-ui/react";
import type { ReactNode } from "react";

import { instant } from "../time";
import type { JobResponse, TaskInstanceKey } from "../types";
import { Conditions } from "./Conditions";
import { Events } from "./Events";
import { LogViewer } from "./LogViewer";
import { PodTable } from "./PodTable";
import { ReplicaTable } from "./ReplicaTable";
import { StateBadge } from "./StateBadge";
import { Warnings } from "./Warnings";

function Section({ title, children }: { title: string; children: ReactNode }) {
  return (
    <Stack as="section" gap={2} aria-label={title}>
      <Heading as="h3" size="md">
        {title}
      </Heading>
      {children}
    </Stack>
  );
}

/** The `job` view: state, conditions, replicas, pods, stuck pods, events and logs. */
export function JobView({ data, task }: { data: JobResponse; task: TaskInstanceKey }) {
  const { job, status } = data;
  const now = instant(data.server_time);
  return (
    <Stack gap={5}>
      <HStack gap={3} wrap="wrap">
        {status ? <StateBadge state={status.state} /> : null}
        {job ? (
          <Text fontFamily="mono">
            {job.kind} {job.namespace}/{job.name}
          </Text>
        ) : null}
        {job?.link ? (
          <Link href={job.link} rel="noreferrer" target="_blank" colorPalette="blue">
            Open in the cluster
          </Link>
        ) : null}
        {data.task ? <Text color="fg.muted">try {data.task.try_number}</Text> : null}
      </HStack>
      {status?.reason || status?.message ? (
        <Text>
          {status.reason ? <strong>{status.reason}: </strong> : null}
          {status.message}
        </Text>
      ) : null}
      {!status && data.detail ? <Text color="fg.warning">{data.detail}</Text> : null}
      <Warnings warnings={data.warnings ?? []} />
      <Section title="Conditions">
        <Conditions conditions={status?.conditions ?? []} />
      </Section>
      <Section title="Replicas">
        <ReplicaTable replicas={data.replicas ?? []} />
      </Section>
      <Section title="Pods">
        <PodTable pods={data.pods ?? []} now={now} />
      </Section>
      <Section title="Logs">
        <LogViewer sources={data.log_sources ?? []} task={task} />
      </Section>
      <Section title="Events">
        <Events events={data.events ?? []} now={now} />
      </Section>
    </Stack>
  );
}
