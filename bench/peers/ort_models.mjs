// ONNX Runtime peer of the imported-model benchmarks: runs MODEL on the inputs NAME=FILE.npy
// (float32 or int64), writes the first output to OUT.npy (to compare with dflow's) and prints
// {"version", "ms_1t", "ms_2t"} as JSON: median milliseconds of RUNS runs after a few warm-up
// runs, on one and two intra-op threads (or only on those $DFLOW_ORT_THREADS lists, e.g. "2").
// Usage: node ort_models.mjs MODEL OUT.npy RUNS NAME=FILE.npy...  (onnxruntime-node resolvable
// from $DFLOW_ORT_DIR, or else from the current folder)
import { createRequire } from "module";
import { readFileSync, writeFileSync } from "fs";

import { medianMs } from "./ort_timing.mjs";

const require = createRequire((process.env.DFLOW_ORT_DIR ?? process.cwd()) + "/");
const ort = require("onnxruntime-node");

// A .npy file (version 1 or 2, little-endian f4 or i8, C order) as an ort.Tensor.
function readNpy(path) {
  const buf = readFileSync(path);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString("latin1", start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${path}: Fortran order`);
  const dims = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").map((s) => s.trim())
    .filter((s) => s.length > 0).map(Number);
  const data = buf.subarray(start + headerLen);
  const bytes = data.buffer.slice(data.byteOffset, data.byteOffset + data.length);
  if (descr === "<f4") return new ort.Tensor("float32", new Float32Array(bytes), dims);
  if (descr === "<i8") return new ort.Tensor("int64", new BigInt64Array(bytes), dims);
  throw new Error(`${path}: dtype ${descr} (float32 or int64 expected)`);
}

function writeNpy(path, tensor) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${tensor.dims.join(", ")}${
    tensor.dims.length === 1 ? "," : ""}), }`;
  header += " ".repeat(63 - ((header.length + 10) % 64)) + "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  writeFileSync(path, Buffer.concat([head, Buffer.from(header, "latin1"), data]));
}

const [model, out, runs, ...inputs] = process.argv.slice(2);
const feeds = {};
for (const arg of inputs) {
  const eq = arg.indexOf("=");
  feeds[arg.slice(0, eq)] = readNpy(arg.slice(eq + 1));
}
const result = { version: require("onnxruntime-node/package.json").version };
const threadCounts = (process.env.DFLOW_ORT_THREADS ?? "1,2").split(",").map(Number);
for (const threads of threadCounts) {
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  if (threads === threadCounts[0]) {
    const y = await session.run(feeds);
    writeNpy(out, y[session.outputNames[0]]);
  }
  result[`ms_${threads}t`] = await medianMs(session, feeds, Math.max(2, runs / 10), Number(runs));
}
console.log(JSON.stringify(result));
