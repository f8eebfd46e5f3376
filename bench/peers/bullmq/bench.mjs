// The BullMQ side of bench/peers, run by the Go program in the directory
// above (see its README): times the given phases against the Redis at
// 127.0.0.1:<port> and prints one JSON line per phase, {"phase", "seconds"}.
//
//   node bench.mjs --port 6390 --jobs 20000 --concurrency 16 --payload 100 \
//       --batch 1000 --phases enqueue,process --timeout-ms 300000
//
// enqueue: addBulk of --batch jobs at a time; process: a Worker with
// --concurrency started on the waiting jobs, until the processor returned for
// all of them; concurrent: a Worker started on the empty queue while the jobs
// are added as in enqueue. Jobs are removed when completed (removeOnComplete),
// as asynq and streamq keep no record of them either.
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';

const { values } = parseArgs({
  options: {
    port: { type: 'string' },
    jobs: { type: 'string' },
    concurrency: { type: 'string' },
    payload: { type: 'string' },
    batch: { type: 'string' },
    phases: { type: 'string' },
    'timeout-ms': { type: 'string' },
  },
});

function positive(name) {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 0) {
    throw new Error(`--${name} ${values[name]}: give a whole number`);
  }
  return n;
}

const port = positive('port');
const jobs = positive('jobs');
const concurrency = positive('concurrency');
const batch = positive('batch');
const timeoutMs = positive('timeout-ms');
const phases = (values.phases ?? '').split(',').filter(Boolean);

let payload = '';
for (let i = 0; i < positive('payload'); i++) {
  payload += String.fromCharCode(97 + (i % 26));
}

// The whole run is bounded: a phase that hangs ends the process with an error.
const timer = setTimeout(() => {
  console.error(`bullmq: phases ${phases} took longer than ${timeoutMs} ms`);
  process.exit(2);
}, timeoutMs);

// In an ES module BullMQ takes ready ioredis clients rather than options.
// Workers need their own connection: they block on it.
const redis = () => new IORedis({ host: '127.0.0.1', port, maxRetriesPerRequest: null });
const queueName = 'peers';
const queueConnection = redis();
const queue = new Queue(queueName, { connection: queueConnection });

async function enqueue() {
  const job = { name: 'noop', data: { payload }, opts: { removeOnComplete: true } };
  for (let lo = 0; lo < jobs; lo += batch) {
    const n = Math.min(batch, jobs - lo);
    await queue.addBulk(Array.from({ length: n }, () => job));
  }
}

// startWorker starts a Worker and returns it with a promise that resolves
// when the processor has returned for every job.
function startWorker() {
  let handled = 0;
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  const connection = redis();
  const worker = new Worker(queueName, async () => {
    handled++;
    if (handled === jobs) done();
  }, { connection, concurrency });
  worker.on('error', (err) => console.error('bullmq worker:', err));
  return { worker, connection, all };
}

function report(phase, t0) {
  console.log(JSON.stringify({ phase, seconds: (performance.now() - t0) / 1000 }));
}

for (const phase of phases) {
  const t0 = performance.now();
  if (phase === 'enqueue') {
    await enqueue();
    report(phase, t0);
  } else if (phase === 'process' || phase === 'concurrent') {
    const { worker, connection, all } = startWorker();
    if (phase === 'concurrent') {
      await enqueue();
    }
    await all;
    report(phase, t0);
    await worker.close();
    connection.disconnect();
  } else {
    throw new Error(`unknown phase ${phase}: use enqueue, process or concurrent`);
  }
}

await queue.close();
queueConnection.disconnect();
clearTimeout(timer);
