package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/priority"
)

// maxStdinPayload bounds a payload read from stdin.
const maxStdinPayload = 64 << 20

// enqueueJSON is the JSON shape of enqueue.
type enqueueJSON struct {
	Queue     string     `json:"queue"`
	ID        string     `json:"id"`
	Duplicate bool       `json:"duplicate"`
	DueAt     *time.Time `json:"due_at,omitempty"`
	Priority  *int       `json:"priority,omitempty"`
}

func newEnqueueCmd(a *app) *cobra.Command {
	var headers []string
	var in, ttl time.Duration
	var at, unique string
	var prio int
	cmd := &cobra.Command{
		Use:   "enqueue <queue> [payload|-]",
		Short: "Enqueue one job (payload as an argument, or from stdin with -)",
		Long: `Enqueue one job with streamq.Producer (or priority.Queue.Push with --priority)
and print its ID. The payload is the second argument, or stdin when it is "-"
or missing. --in and --at delay the job; --unique with --ttl enqueues it only if
no job with that key is waiting, scheduled, retrying or running (the existing
job's ID is printed and the exit code is 1).

JSON: {"queue","id","duplicate","due_at","priority"}`,
		Example: `  streamq enqueue orders '{"order":42}'
  streamq enqueue orders --in 5m --header tenant=acme '{"order":42}'
  echo '{"order":42}' | streamq enqueue orders - --unique order:42 --ttl 1h
  streamq enqueue reports --priority 10 '{"report":"daily"}'`,
		Args: rangeArgs(1, 2, "<queue> [payload|-]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := keyValues("header", headers)
			if err != nil {
				return err
			}
			var due time.Time
			switch {
			case in < 0:
				return usagef("--in %s: use a positive delay", in)
			case in > 0 && at != "":
				return usagef("use --in or --at, not both")
			case in > 0:
				due = time.Now().Add(in)
			case at != "":
				if due, err = time.Parse(time.RFC3339Nano, at); err != nil {
					return usagef("--at %q: use an RFC 3339 time like 2026-11-25T08:00:00Z", at)
				}
			}
			if (unique == "") != (ttl == 0) {
				return usagef("--unique and --ttl go together: --unique <key> --ttl <how long the key is held>")
			}
			usePrio := cmd.Flags().Changed("priority")
			if usePrio && (!due.IsZero() || unique != "") {
				return usagef("--priority pushes into the priority set, which takes no --in, --at or --unique")
			}
			payload, err := readPayload(a.stdin, args)
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
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			out := enqueueJSON{Queue: args[0], DueAt: jsonTime(due)}
			if usePrio {
				pq, err := priority.NewQueue(q, nil)
				if err != nil {
					return err
				}
				if out.ID, err = pq.Push(ctx, priority.Job{Priority: prio, Payload: payload, Headers: h}); err != nil {
					if errors.Is(err, priority.ErrInvalidPriority) {
						return usageErr(err)
					}
					return err
				}
				out.Priority = &prio
			} else {
				p, err := streamq.NewProducer(q, nil)
				if err != nil {
					return err
				}
				var opts []streamq.EnqueueOption
				if h != nil {
					opts = append(opts, streamq.WithHeaders(h))
				}
				if !due.IsZero() {
					opts = append(opts, streamq.ProcessAt(due))
				}
				if unique != "" {
					opts = append(opts, streamq.Unique(unique, ttl))
				}
				out.ID, err = p.Enqueue(ctx, payload, opts...)
				switch {
				case errors.Is(err, streamq.ErrDuplicate):
					out.Duplicate = true
				case err != nil:
					var ce *streamq.ConfigError
					if errors.As(err, &ce) {
						return usageErr(err)
					}
					return err
				}
			}
			if a.json {
				if err := printJSON(a.stdout, out); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(a.stdout, out.ID)
			}
			if out.Duplicate {
				return fmt.Errorf("not enqueued: job %s holds unique key %q", out.ID, unique)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&headers, "header", nil, "job header key=value (repeatable)")
	fs.DurationVar(&in, "in", 0, "run the job after this delay (e.g. 5m)")
	fs.StringVar(&at, "at", "", "run the job at this RFC 3339 time")
	fs.StringVar(&unique, "unique", "", "unique key: enqueue only if no job holds it (with --ttl)")
	fs.DurationVar(&ttl, "ttl", 0, "how long the unique key is held at most")
	fs.IntVar(&prio, "priority", 0, "push into the queue's priority set with this priority (higher runs first)")
	return cmd
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
