// ONNX Runtime peer of the MLP inference benchmark: runs MODEL (exported by export_mlp_onnx.py)
// on a random [128, 784] batch and prints {"version", "infer_ms_1t", "infer_ms_2t"} as JSON,
// median milliseconds over 300 runs after 30 warm-up runs.
// Usage: node ort_mlp.mjs MODEL  (with onnxruntime-node resolvable from NODE_PATH)
import { createRequire } from "module";

import { medianMs } from "./ort_timing.mjs";

const require = createRequire(process.cwd() + "/");
const ort = require("onnxruntime-node");

const model = process.argv[2];
const x = new Float32Array(128 * 784).map(() => Math.random());
const feeds = { x: new ort.Tensor("float32", x, [128, 784]) };
const result = { version: require("onnxruntime-node/package.json").version };
for (const threads of [1, 2]) {
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  result[`infer_ms_${threads}t`] = await medianMs(session, feeds, 30, 300);
}
console.log(JSON.stringify(result));
