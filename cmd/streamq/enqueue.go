package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/priority"
)

// maxStdinPayload bounds a payload read from stdin, and the input of
// enqueue --jsonl.
const maxStdinPayload = 64 << 20

// enqueueJSON is the JSON shape of enqueue.
type enqueueJSON struct {
	Queue     string     `json:"queue"`
	ID        string     `json:"id"`
	Duplicate bool       `json:"duplicate"`
	DueAt     *time.Time `json:"due_at,omitempty"`
	Priority  *int       `json:"priority,omitempty"`
}

// enqueueManyJSON is the JSON shape of enqueue --jsonl.
type enqueueManyJSON struct {
	Queue    string     `json:"queue"`
	Count    int        `json:"count"`
	IDs      []string   `json:"ids"`
	DueAt    *time.Time `json:"due_at,omitempty"`
	Priority *int       `json:"priority,omitempty"`
}

// enqueueFlags are the flags of enqueue.
type enqueueFlags struct {
	headers     []string
	in, ttl     time.Duration
	at, unique  string
	prio        int
	usePrio     bool
	jsonl       string
	kind        string
	tags        []string
	h           map[string]string
	due         time.Time
	payloadArgs []string
}

// check validates the flags and fills h and due.
func (f *enqueueFlags) check() (err error) {
	if f.h, err = keyValues("header", f.headers); err != nil {
		return err
	}
	switch {
	case f.in < 0:
		return usagef("--in %s: use a positive delay", f.in)
	case f.in > 0 && f.at != "":
		return usagef("use --in or --at, not both")
	case f.in > 0:
		f.due = time.Now().Add(f.in)
	case f.at != "":
		if f.due, err = time.Parse(time.RFC3339Nano, f.at); err != nil {
			return usagef("--at %q: use an RFC 3339 time like 2026-11-25T08:00:00Z", f.at)
		}
	}
	if (f.unique == "") != (f.ttl == 0) {
		return usagef("--unique and --ttl go together: --unique <key> --ttl <how long the key is held>")
	}
	if f.usePrio && (!f.due.IsZero() || f.unique != "") {
		return usagef("--priority pushes into the priority set, which takes no --in, --at or --unique")
	}
	if f.jsonl != "" && (len(f.payloadArgs) > 0 || f.unique != "") {
		return usagef("--jsonl reads the payloads from %s: leave out the payload argument and --unique (a unique key is per job)", f.jsonl)
	}
	return nil
}

func newEnqueueCmd(a *app) *cobra.Command {
	var f enqueueFlags
	cmd := &cobra.Command{
		Use:   "enqueue <queue> [payload|-]",
		Short: "Enqueue one job (payload as an argument, or from stdin with -), or many with --jsonl",
		Long: `Enqueue one job with streamq.Producer (or priority.Queue.Push with --priority)
and print its ID. The payload is the second argument, or stdin when it is "-"
or missing. --in and --at delay the job; --unique with --ttl enqueues it only if
no job with that key is waiting, scheduled, retrying or running (the existing
job's ID is printed and the exit code is 1). --kind and --tag set the job's
kind (which a streamq.Mux routes by) and tags.

--jsonl FILE (or - for stdin) enqueues one job per line, each line a JSON
document that is the job's payload (empty lines are skipped), in batches of
1,000 per Redis call (EnqueueBatch, or PushBatch with --priority), and prints
their IDs, one per line. Every line is checked first: a line that is not JSON
stops the command before anything is sent. --header, --in, --at, --kind, --tag
and --priority apply to every job. The input may hold up to 64 MiB.

--priority needs a priority queue (a new queue becomes one): on a stream queue
its consumers would never see the job; there, enqueue with
--header streamq-priority=N for a consumer that runs priority.Forward.

JSON: {"queue","id","duplicate","due_at","priority"};
with --jsonl {"queue","count","ids":[...],"due_at","priority"}`,
		Example: `  streamq enqueue orders '{"order":42}'
  streamq enqueue orders --in 5m --header tenant=acme '{"order":42}'
  echo '{"order":42}' | streamq enqueue orders - --unique order:42 --ttl 1h
  streamq enqueue reports --priority 10 '{"report":"daily"}'
  streamq enqueue mail --kind email.welcome --tag tenant:42 '{"to":"ada@example.com"}'
  streamq enqueue orders --jsonl orders.jsonl
  jq -c '.[]' backlog.json | streamq enqueue orders --jsonl - --json`,
		Args: rangeArgs(1, 2, "<queue> [payload|-]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.usePrio = cmd.Flags().Changed("priority")
			f.payloadArgs = args[1:]
			if err := f.check(); err != nil {
				return err
			}
			var payloads [][]byte
			var err error
			if f.jsonl != "" {
				payloads, err = a.readJSONLines(f.jsonl)
			} else {
				var p []byte
				p, err = readPayload(a.stdin, args)
				payloads = [][]byte{p}
			}
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			q, err := streamq.NewQueue(c, args[0], &streamq.QueueConfig{KeyPrefix: a.conn.prefix, Group: a.conn.group})
			if err != nil {
				return usageErr(err)
			}
			if f.usePrio {
				if err := a.checkPriorityQueue(cmd, args[0]); err != nil {
					return err
				}
			}
			if f.jsonl != "" {
				return a.enqueueMany(cmd, q, &f, payloads)
			}
			return a.enqueueOne(cmd, q, &f, payloads[0])
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&f.headers, "header", nil, "job header key=value (repeatable)")
	fs.DurationVar(&f.in, "in", 0, "run the job after this delay (e.g. 5m)")
	fs.StringVar(&f.at, "at", "", "run the job at this RFC 3339 time")
	fs.StringVar(&f.unique, "unique", "", "unique key: enqueue only if no job holds it (with --ttl)")
	fs.DurationVar(&f.ttl, "ttl", 0, "how long the unique key is held at most")
	fs.StringVar(&f.kind, "kind", "", "the job's kind, which a streamq.Mux routes by (e.g. email.send)")
	fs.StringArrayVar(&f.tags, "tag", nil, "a tag of the job (repeatable)")
	fs.IntVar(&f.prio, "priority", 0, "push into the queue's priority set with this priority (higher runs first)")
	fs.StringVar(&f.jsonl, "jsonl", "", `enqueue one job per line of this file ("-": stdin), each line a JSON payload`)
	return cmd
}

// checkPriorityQueue refuses --priority on a queue registered as a stream
// queue: pushing into its priority set would hide the job from its
// consumers and make every tool show the queue as a priority queue.
func (a *app) checkPriorityQueue(cmd *cobra.Command, name string) error {
	in, err := a.inspector(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	q, err := in.Queue(ctx, name)
	switch {
	case errors.Is(err, inspect.ErrQueueNotFound):
		return nil // a new queue: a priority queue from now on
	case err != nil:
		return err
	case q.Kind() != inspect.KindPriority:
		return usagef("queue %s is a %s queue: --priority pushes into a priority queue's set, which its consumers never read; "+
			"enqueue without --priority, or with --header %s=N for a consumer that runs priority.Forward", name, q.Kind(), priority.HeaderPriority)
	}
	return nil
}

// enqueueOne enqueues one job and prints its ID.
func (a *app) enqueueOne(cmd *cobra.Command, q *streamq.Queue, f *enqueueFlags, payload []byte) error {
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	out := enqueueJSON{Queue: q.Name(), DueAt: jsonTime(f.due)}
	var err error
	if f.usePrio {
		pq, err := priority.NewQueue(q, nil)
		if err != nil {
			return err
		}
		if out.ID, err = pq.Push(ctx, priority.Job{Priority: f.prio, Payload: payload, Headers: f.h, Kind: f.kind, Tags: f.tags}); err != nil {
			return enqueueErr(err)
		}
		out.Priority = &f.prio
	} else {
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			return err
		}
		opts := f.options()
		if f.unique != "" {
			opts = append(opts, streamq.Unique(f.unique, f.ttl))
		}
		out.ID, err = p.Enqueue(ctx, payload, opts...)
		switch {
		case errors.Is(err, streamq.ErrDuplicate):
			out.Duplicate = true
		case err != nil:
			return enqueueErr(err)
		}
	}
	if a.json {
		err = printJSON(a.stdout, out)
	} else {
		fmt.Fprintln(a.stdout, out.ID)
	}
	if err == nil && out.Duplicate {
		err = fmt.Errorf("not enqueued: job %s holds unique key %q", out.ID, f.unique)
	}
	return err
}

// options are the enqueue options of the flags shared by every job.
func (f *enqueueFlags) options() []streamq.EnqueueOption {
	var opts []streamq.EnqueueOption
	if f.h != nil {
		opts = append(opts, streamq.WithHeaders(f.h))
	}
	switch {
	case f.in > 0: // on the server's clock, not this machine's
		opts = append(opts, streamq.ProcessIn(f.in))
	case !f.due.IsZero():
		opts = append(opts, streamq.ProcessAt(f.due))
	}
	if f.kind != "" {
		opts = append(opts, streamq.WithKind(f.kind))
	}
	if len(f.tags) > 0 {
		opts = append(opts, streamq.Tags(f.tags...))
	}
	return opts
}

// enqueueErr makes a usage error of an enqueue error about the job or the
// options.
func enqueueErr(err error) error {
	var ce *streamq.ConfigError
	if errors.As(err, &ce) || errors.Is(err, priority.ErrInvalidPriority) {
		return usageErr(err)
	}
	return err
}

// enqueueMany enqueues payloads in batches of streamq.MaxBatchChunk and
// prints their IDs. After a failed batch it prints the IDs enqueued before
// and says how many were.
func (a *app) enqueueMany(cmd *cobra.Command, q *streamq.Queue, f *enqueueFlags, payloads [][]byte) error {
	send, err := a.batchSender(q, f)
	if err != nil {
		return err
	}
	out := enqueueManyJSON{Queue: q.Name(), IDs: make([]string, 0, len(payloads)), DueAt: jsonTime(f.due)}
	if f.usePrio {
		out.Priority = &f.prio
	}
	var sendErr error
	for start := 0; start < len(payloads) && sendErr == nil; start += streamq.MaxBatchChunk {
		chunk := payloads[start:min(start+streamq.MaxBatchChunk, len(payloads))]
		ctx, cancel := a.ctx(cmd)
		ids, err := send(ctx, chunk)
		cancel()
		for _, id := range ids {
			if id != "" {
				out.IDs = append(out.IDs, id)
			}
		}
		if err != nil {
			sendErr = fmt.Errorf("enqueued %d of %d jobs, then lines %d to %d failed: %w", len(out.IDs), len(payloads), start+1, start+len(chunk), enqueueErr(err))
		}
	}
	out.Count = len(out.IDs)
	if a.json {
		if err := printJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		for _, id := range out.IDs {
			fmt.Fprintln(a.stdout, id)
		}
	}
	return sendErr
}

// batchSender returns the function that enqueues one batch of payloads with
// the flags' options.
func (a *app) batchSender(q *streamq.Queue, f *enqueueFlags) (func(context.Context, [][]byte) ([]string, error), error) {
	if f.usePrio {
		pq, err := priority.NewQueue(q, nil)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, chunk [][]byte) ([]string, error) {
			jobs := make([]priority.Job, len(chunk))
			for i, p := range chunk {
				jobs[i] = priority.Job{Priority: f.prio, Payload: p, Headers: f.h, Kind: f.kind, Tags: f.tags}
			}
			return pq.PushBatch(ctx, jobs)
		}, nil
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		return nil, err
	}
	opts := f.options()
	return func(ctx context.Context, chunk [][]byte) ([]string, error) {
		jobs := make([]streamq.Job, len(chunk))
		for i, pl := range chunk {
			jobs[i] = streamq.Job{Payload: pl}
		}
		return p.EnqueueBatch(ctx, jobs, opts...)
	}, nil
}

// readJSONLines reads the payloads of enqueue --jsonl from path ("-":
// stdin): one JSON document per non-empty line, every line checked before
// any is sent.
func (a *app) readJSONLines(path string) ([][]byte, error) {
	var r io.Reader = a.stdin
	name := "stdin"
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return nil, usagef("--jsonl: %v", err)
		}
		defer file.Close()
		r, name = file, path
	}
	data, err := io.ReadAll(io.LimitReader(r, maxStdinPayload+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxStdinPayload {
		return nil, usagef("--jsonl: %s holds more than %d bytes: split it", name, maxStdinPayload)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxStdinPayload)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			var v any
			err := json.Unmarshal(line, &v)
			return nil, usagef("--jsonl: line %d of %s is not JSON (%v): nothing was enqueued", n, name, err)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, usagef("--jsonl: %s holds no job (one JSON payload per line)", name)
	}
	return out, nil
}

// readPayload returns the payload argument, or stdin for "-" or none.
func readPayload(stdin io.Reader, args []string) ([]byte, error) {
	if len(args) == 2 && args[1] != "-" {
		return []byte(args[1]), nil
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxStdinPayload+1))
	if err != nil {
		return nil, fmt.Errorf("read payload from stdin: %w", err)
	}
	if len(b) > maxStdinPayload {
		return nil, usagef("payload on stdin is larger than %d bytes", maxStdinPayload)
	}
	return b, nil
}
