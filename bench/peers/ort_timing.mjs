// What the ONNX Runtime peers share: the median of a session's run times.

// Median milliseconds of `runs` runs of `session` on `feeds`, after `warmup` runs.
export async function medianMs(session, feeds, warmup, runs) {
  for (let i = 0; i < warmup; i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}
