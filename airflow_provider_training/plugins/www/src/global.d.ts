import type { SystemContext } from "@chakra-ui/react";

declare global {
  /** Airflow's UI shares its Chakra theme here for plugins (airflow/ui, ChakraCustomProvider). */
  var ChakraUISystem: SystemContext | undefined;
}

export {};
