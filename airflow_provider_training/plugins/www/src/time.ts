/** "42s", "5m", "3h", "2d": how long ago `rfc3339` was, as kubectl prints ages; "" when unknown. */
export function age(rfc3339: string | null | undefined, now: number = Date.now()): string {
  if (!rfc3339) return "";
  const then = Date.parse(rfc3339);
  if (Number.isNaN(then)) return "";
  const seconds = Math.max(0, Math.floor((now - then) / 1000));
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 120) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h`;
  return `${Math.floor(hours / 24)}d`;
}

/** The time `rfc3339` (the API server's now) in ms, to measure ages from; `undefined` (the browser's now) when
 * unknown. The browser's clock may be minutes off the cluster's. */
export function instant(rfc3339: string | null | undefined): number | undefined {
  const then = rfc3339 ? Date.parse(rfc3339) : Number.NaN;
  return Number.isNaN(then) ? undefined : then;
}

/** An RFC 3339 time as the browser's local date and time; "" when unknown. */
export function localTime(rfc3339: string | null | undefined): string {
  if (!rfc3339) return "";
  const date = new Date(rfc3339);
  return Number.isNaN(date.getTime()) ? rfc3339 : date.toLocaleString();
}
