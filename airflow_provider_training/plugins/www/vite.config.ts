/// <reference types="vitest/config" />
import { resolve } from "node:path";
import { defineConfig } from "vite";

/**
 * The bundle Airflow's UI loads: one UMD file, `dist/main.umd.cjs`, whose global is `AirflowPlugin` (the
 * component). React, ReactDOM, the JSX runtime and Chakra UI are the host's, taken from `globalThis`.
 * `TRAINING_UI_OUT_DIR` builds elsewhere (the check that the committed bundle matches the sources).
 */
const HOST_GLOBALS: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "@chakra-ui/react": "ChakraUI",
};

export default defineConfig(({ command }) => ({
  build: {
    emptyOutDir: true,
    lib: {
      entry: resolve(import.meta.dirname, "src/main.tsx"),
      fileName: () => "main.umd.cjs",
      formats: ["umd"],
      name: "AirflowPlugin",
    },
    outDir: process.env.TRAINING_UI_OUT_DIR ?? resolve(import.meta.dirname, "dist"),
    reportCompressedSize: false,
    rollupOptions: {
      external: Object.keys(HOST_GLOBALS),
      output: { globals: HOST_GLOBALS },
    },
    sourcemap: false,
  },
  // Only the library build: the tests run React's development build, which has act().
  define: command === "build" ? { "process.env.NODE_ENV": JSON.stringify("production") } : {},
  esbuild: { jsx: "automatic", legalComments: "none" },
  test: {
    environment: "happy-dom",
    include: ["src/**/*.test.{ts,tsx}"],
    restoreMocks: true,
    setupFiles: ["./src/test/setup.ts"],
  },
}));
