package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
)

// jobJSON is the JSON shape of a job (jobs, job, dead ls, dead show).
// Empty fields are omitted, except id, entry_id, queue, state, attempt,
// headers and errors.
type jobJSON struct {
	ID         string            `json:"id"`
	EntryID    string            `json:"entry_id"`
	Queue      string            `json:"queue"`
	State      string            `json:"state"`
	Payload    *blob             `json:"payload,omitempty"`
	Headers    map[string]string `json:"headers"`
	Attempt    int               `json:"attempt"`
	Priority   int64             `json:"priority,omitempty"`
	EnqueuedAt *time.Time        `json:"enqueued_at,omitempty"`
	DueAt      *time.Time        `json:"due_at,omitempty"`
	StartedAt  *time.Time        `json:"started_at,omitempty"`
	DeadAt     *time.Time        `json:"dead_at,omitempty"`
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	Owner      string            `json:"owner,omitempty"`
	RunTimeMS  *int64            `json:"run_time_ms,omitempty"` // running jobs; completed ones, even at 0
	LastError  string            `json:"last_error,omitempty"`
	Errors     []failureJSON     `json:"errors"`
	Reason     string            `json:"reason,omitempty"`
	Progress   *progressJSON     `json:"progress,omitempty"`
	Result     *blob             `json:"result,omitempty"`
	TraceID    string            `json:"trace_id,omitempty"`
	Kind       string            `json:"kind,omitempty"`
	Tags       []string          `json:"tags,omitempty"`
	// PayloadSize is set for completed jobs, whose records keep payloads
	// only up to streamq.CompletedPayloadMax bytes.
	PayloadSize int `json:"payload_size,omitempty"`
}

type failureJSON struct {
	At      *time.Time `json:"at,omitempty"`
	Attempt int        `json:"attempt"`
	Error   string     `json:"error"`
}

type progressJSON struct {
	Percent int        `json:"percent"`
	Message string     `json:"message,omitempty"`
	At      *time.Time `json:"at,omitempty"`
}

func newJobJSON(j *inspect.Job) jobJSON {
	out := jobJSON{
		ID: j.ID, EntryID: j.EntryID, Queue: j.Queue, State: string(j.State),
		Payload: newBlob(j.Payload), Headers: j.Headers, Attempt: j.Attempt, Priority: j.Priority,
		EnqueuedAt: jsonTime(j.EnqueuedAt), DueAt: jsonTime(j.DueAt), StartedAt: jsonTime(j.StartedAt), DeadAt: jsonTime(j.DeadAt),
		Owner: j.Owner, LastError: j.LastError, Errors: []failureJSON{},
		Reason: j.Reason, Result: newBlob(j.Result), TraceID: j.TraceID, Kind: j.Kind, Tags: j.Tags,
		FinishedAt: jsonTime(j.FinishedAt), PayloadSize: j.PayloadSize,
	}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if j.RunTime > 0 || j.State == inspect.StateCompleted {
		n := ms(j.RunTime)
		out.RunTimeMS = &n
	}
	for _, f := range j.Errors {
		out.Errors = append(out.Errors, failureJSON{At: jsonTime(f.At), Attempt: f.Attempt, Error: f.Error})
	}
	if p := j.Progress; p != nil {
		out.Progress = &progressJSON{Percent: p.Percent, Message: p.Message, At: jsonTime(p.At)}
	}
	return out
}

// pageJSON is the JSON shape of a listing (jobs, dead ls).
type pageJSON struct {
	Jobs    []jobJSON `json:"jobs"`
	Cursor  string    `json:"cursor"`
	Scanned int       `json:"scanned"`
}

// listFlags are the flags of a job listing.
type listFlags struct {
	state   string
	limit   int
	cursor  string
	headers []string
	grep    string
	kind    string
	tags    []string
}

func (f *listFlags) register(cmd *cobra.Command, withState bool) {
	fs := cmd.Flags()
	if withState {
		fs.StringVar(&f.state, "state", "waiting", "waiting, running, delayed, retrying, dead, cancelled or completed")
	}
	fs.IntVar(&f.limit, "limit", defaultListLimit, "most jobs to list (1..1000)")
	fs.StringVar(&f.cursor, "cursor", "", "where to go on: the cursor printed by the previous page")
	fs.StringArrayVar(&f.headers, "header", nil, "only jobs with header key=value (repeatable; all must match)")
	fs.StringVar(&f.grep, "grep", "", "only jobs whose payload contains this text")
	fs.StringVar(&f.kind, "kind", "", "only jobs of this kind")
	fs.StringArrayVar(&f.tags, "tag", nil, "only jobs with this tag (repeatable; all must match)")
}

func (f *listFlags) options() (inspect.ListOptions, error) {
	var o inspect.ListOptions
	if f.state != "" {
		s, err := inspect.ParseState(f.state)
		if err != nil || s == inspect.StateDone {
			msg := "use waiting, running, delayed, retrying, dead, cancelled or completed"
			if s == inspect.StateDone {
				msg = "finished jobs are listed as completed, when the queue keeps them (QueueConfig.CompletedRetention); others only by job ID ('streamq job <queue> <id>'); " + msg
			}
			return o, usagef("--state %q: %s", f.state, msg)
		}
		o.State = s
	}
	if f.limit < 1 || f.limit > 1000 {
		return o, usagef("--limit %d: use 1..1000", f.limit)
	}
	h, err := keyValues("header", f.headers)
	if err != nil {
		return o, err
	}
	o.Limit, o.Cursor, o.Header, o.Grep, o.Kind, o.Tags = f.limit, f.cursor, h, f.grep, f.kind, f.tags
	return o, nil
}

func newJobsCmd(a *app) *cobra.Command {
	var f listFlags
	cmd := &cobra.Command{
		Use:   "jobs <queue>",
		Short: "List a queue's jobs in one state, a page at a time",
		Long: `List the jobs of a queue in one state, oldest first (completed jobs: the last
to finish first, kept only when the queue's consumers set
QueueConfig.CompletedRetention), a page of --limit at a time;
the command to get the next page is printed after the table. --header, --grep,
--kind and --tag filter; a filtered page examines a bounded number of entries, so it may be short
while more follow.

JSON: {"jobs":[job...],"cursor":"<next page, empty at the end>","scanned":<entries examined>},
each job as 'streamq job --json' prints it.`,
		Example: `  streamq jobs orders
  streamq jobs orders --state retrying --limit 20
  streamq jobs orders --state dead --header tenant=acme --grep "timeout"
  streamq jobs orders --kind email.send --tag tenant:42
  streamq jobs orders --state completed --limit 20
  streamq jobs orders --state waiting --cursor 1732500000000-0 --json`,
		Args: exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			return a.listJobs(cmd, args[0], o, append([]string{"jobs", args[0], "--state", string(o.State)}, f.again()...))
		},
	}
	f.register(cmd, true)
	return cmd
}

// again returns the flags of the listing that a next-page command keeps
// (the state aside): limit, headers, grep.
func (f *listFlags) again() []string {
	var out []string
	if f.limit != defaultListLimit {
		out = append(out, "--limit", strconv.Itoa(f.limit))
	}
	for _, h := range f.headers {
		out = append(out, "--header", h)
	}
	if f.grep != "" {
		out = append(out, "--grep", f.grep)
	}
	if f.kind != "" {
		out = append(out, "--kind", f.kind)
	}
	for _, t := range f.tags {
		out = append(out, "--tag", t)
	}
	return out
}

// defaultListLimit is the default of --limit.
const defaultListLimit = 50

// listJobs prints one page; again is the command line (without "streamq"
// and the cursor) that lists the next one.
func (a *app) listJobs(cmd *cobra.Command, queue string, o inspect.ListOptions, again []string) error {
	q, err := a.queue(cmd, queue)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	page, err := q.Jobs(ctx, o)
	if err != nil {
		if errors.Is(err, inspect.ErrInvalidCursor) {
			return usageErr(err)
		}
		return err
	}
	jobs := page.Jobs
	if a.json {
		out := pageJSON{Jobs: []jobJSON{}, Cursor: page.Cursor, Scanned: page.Scanned}
		for i := range jobs {
			out.Jobs = append(out.Jobs, newJobJSON(&jobs[i]))
		}
		return printJSON(a.stdout, out)
	}
	now := time.Now()
	prio := q.Kind() == inspect.KindPriority
	head := []string{"ID", "STATE", "ATTEMPT", "ENQUEUED", "WHEN", "OWNER", "ERROR", "PAYLOAD"}
	if prio {
		head = slices.Insert(head, 2, "PRIORITY")
	}
	// A KIND column when a job of the page has one (untyped queues keep
	// their table).
	kinds := slices.ContainsFunc(jobs, func(j inspect.Job) bool { return j.Kind != "" })
	if kinds {
		head = slices.Insert(head, 1, "KIND")
	}
	t := newTable(a.stdout, head...)
	for i := range jobs {
		j := &jobs[i]
		cells := []any{j.ID, j.State, j.Attempt, since(j.EnqueuedAt, now), when(j, now), dash(j.Owner), dash(shortText(j.LastError, 40)), short(j.Payload, 40)}
		if prio {
			cells = slices.Insert(cells, 2, any(j.Priority))
		}
		if kinds {
			cells = slices.Insert(cells, 1, any(dash(shortText(j.Kind, 30))))
		}
		t.row(cells...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(jobs) == 0 {
		fmt.Fprintf(a.stdout, "(no %s jobs on this page; %d entries examined)\n", o.State, page.Scanned)
		if o.State == inspect.StateCompleted && o.Cursor == "" {
			if r, err := q.CompletedRetention(ctx); err == nil && r.Retention == 0 {
				fmt.Fprintln(a.stdout, "(this queue keeps no completed jobs: set QueueConfig.CompletedRetention on its consumers)")
			}
		}
	}
	if page.Cursor != "" {
		fmt.Fprintf(a.stdout, "more: %s\n", shellLine(append(append([]string{"streamq"}, again...), "--cursor", page.Cursor)))
	}
	return nil
}

// shellLine joins words into a command line a POSIX shell reads back as
// those words: a word with anything but letters, digits and -_./:=@%+, is
// single-quoted.
func shellLine(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = shellQuote(w)
	}
	return strings.Join(out, " ")
}

func shellQuote(w string) string {
	if w != "" && strings.IndexFunc(w, func(r rune) bool {
		return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:=@%+,", r)))
	}) < 0 {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// when is the time that matters for a job in its state.
func when(j *inspect.Job, now time.Time) string {
	switch j.State {
	case inspect.StateDelayed, inspect.StateRetrying:
		return "due " + since(j.DueAt, now)
	case inspect.StateRunning:
		return "running " + age(j.RunTime)
	case inspect.StateDead, inspect.StateCancelled:
		return "dead " + since(j.DeadAt, now)
	case inspect.StateCompleted:
		return "done " + since(j.FinishedAt, now) + ", ran " + age(j.RunTime)
	}
	return "-"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortText(s string, n int) string { return short([]byte(s), n) }

func newJobCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "job <queue> <id>",
		Short: "Show one job in whichever state it is: payload, headers, attempts, errors, progress, result",
		Long: `Show one job by its ID, wherever it is now (waiting, running, delayed, retrying,
dead, cancelled, or done with a result). A JSON payload is pretty-printed, any
other is shown escaped.

JSON: {"id","entry_id","queue","state","payload":{"data","encoding":"text|base64"},
"headers":{},"attempt","priority","enqueued_at","due_at","started_at","dead_at",
"owner","run_time_ms","last_error","errors":[{"at","attempt","error"}],"reason",
"progress":{"percent","message","at"},"result":{"data","encoding"},"trace_id"}
(times RFC 3339 UTC; empty fields omitted except id, entry_id, queue, state,
attempt, headers and errors).`,
		Example: `  streamq job orders 1732500000000-0
  streamq job orders 1732500000000-0 --json | jq -r .payload.data`,
		Args: exactArgs(2, "<queue> <id>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.showJob(cmd, args[0], args[1])
		},
	}
}

func (a *app) showJob(cmd *cobra.Command, queue, id string) error {
	queue, id = partitionJob(queue, id)
	q, err := a.queue(cmd, queue)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	j, err := q.Job(ctx, id)
	if err != nil {
		return jobErr(queue, id, err)
	}
	if a.json {
		return printJSON(a.stdout, newJobJSON(j))
	}
	writeJob(a.stdout, j, time.Now())
	return nil
}

// jobErr explains a job that is not there.
func jobErr(queue, id string, err error) error {
	if errors.Is(err, inspect.ErrJobNotFound) {
		return &exitError{code: exitNotFound, err: &wrapped{msg: fmt.Sprintf("job %s not found in queue %s (gone, or finished and its result expired; 'streamq jobs %s --state <state>' lists jobs)", id, queue, queue), err: err}}
	}
	return err
}

func writeJob(w io.Writer, j *inspect.Job, now time.Time) {
	line := func(k, v string) { fmt.Fprintf(w, "%-12s %s\n", k+":", escape([]byte(v))) }
	line("ID", j.ID)
	if j.EntryID != "" && j.EntryID != j.ID {
		line("Entry", j.EntryID)
	}
	line("Queue", j.Queue)
	if j.Kind != "" {
		line("Kind", j.Kind)
	}
	if len(j.Tags) > 0 {
		line("Tags", strings.Join(j.Tags, ", "))
	}
	line("State", string(j.State))
	if j.Reason != "" {
		line("Reason", j.Reason)
	}
	line("Attempts", fmt.Sprint(j.Attempt))
	if j.Priority != 0 {
		line("Priority", fmt.Sprint(j.Priority))
	}
	for _, t := range []struct {
		k string
		v time.Time
	}{{"Enqueued", j.EnqueuedAt}, {"Due", j.DueAt}, {"Started", j.StartedAt}, {"Dead", j.DeadAt}, {"Finished", j.FinishedAt}} {
		if !t.v.IsZero() {
			line(t.k, clock(t.v)+" ("+since(t.v, now)+")")
		}
	}
	if j.Owner != "" {
		line("Owner", j.Owner)
	}
	switch {
	case j.State == inspect.StateCompleted:
		line("Ran for", age(j.RunTime))
		if len(j.Payload) != j.PayloadSize {
			line("Payload", fmt.Sprintf("%d bytes, not kept (completed jobs keep payloads up to %d bytes)", j.PayloadSize, streamq.CompletedPayloadMax))
		}
	case j.RunTime > 0:
		line("Running for", age(j.RunTime))
	}
	if j.TraceID != "" {
		line("Trace", j.TraceID)
	}
	if p := j.Progress; p != nil {
		line("Progress", fmt.Sprintf("%d%% %s (%s)", p.Percent, p.Message, since(p.At, now)))
	}
	if len(j.Headers) > 0 {
		fmt.Fprintln(w, "Headers:")
		for _, k := range slices.Sorted(maps.Keys(j.Headers)) {
			fmt.Fprintf(w, "  %s: %s\n", escape([]byte(k)), escape([]byte(j.Headers[k])))
		}
	}
	fmt.Fprintf(w, "Payload (%d bytes):\n%s\n", len(j.Payload), indent(pretty(j.Payload)))
	if j.Result != nil {
		fmt.Fprintf(w, "Result (%d bytes):\n%s\n", len(j.Result), indent(pretty(j.Result)))
	}
	if len(j.Errors) > 0 {
		fmt.Fprintln(w, "Errors (oldest first):")
		for _, f := range j.Errors {
			fmt.Fprintf(w, "  attempt %d, %s: %s\n", f.Attempt, clock(f.At), escape([]byte(f.Error)))
		}
	} else if j.LastError != "" {
		line("Last error", j.LastError)
	}
}

// pretty indents JSON, and escapes anything else.
func pretty(b []byte) string {
	if json.Valid(b) {
		var buf bytes.Buffer
		if json.Indent(&buf, b, "", "  ") == nil {
			return buf.String()
		}
	}
	return escape(b)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
