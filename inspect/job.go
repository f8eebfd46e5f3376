package inspect

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Wire fields the inspector reads beyond those of internal/wire (the stable
// job ID and the error history, written by the runtime).
const (
	fieldJobID  = "jid"
	fieldErrors = "errs"
	// headerPriority is priority.HeaderPriority (inspect does not import
	// the priority package).
	headerPriority = "streamq-priority"
	reasonCancel   = "cancelled"
)

// jobFrom builds a Job from the wire fields of a copy whose ID is entryID.
func jobFrom(values map[string]any, entryID string) Job {
	j := Job{ID: entryID, EntryID: entryID}
	for k, v := range values {
		s, _ := wire.Str(v)
		switch k {
		case wire.FieldPayload:
			j.Payload = []byte(s)
		case wire.FieldHeaders:
			_ = json.Unmarshal([]byte(s), &j.Headers) // a malformed header field leaves Headers nil
		case wire.FieldEnqueued:
			j.EnqueuedAt = wire.ParseMillis(s)
		case wire.FieldAttempt:
			j.Attempt, _ = strconv.Atoi(s)
		case wire.FieldLastError:
			j.LastError = s
		case wire.FieldKey:
			j.Key = s
		case wire.FieldFlowKey:
			j.FlowKey = s
		case fieldJobID:
			if s != "" {
				j.ID = s
			}
		case fieldErrors:
			j.Errors = parseFailures(s)
		case wire.FieldKind:
			j.Kind = s
		case wire.FieldTags:
			_ = json.Unmarshal([]byte(s), &j.Tags) // malformed tags leave Tags nil
		}
	}
	j.TraceID = traceID(j.Headers["traceparent"])
	if p, err := strconv.ParseInt(j.Headers[headerPriority], 10, 64); err == nil {
		j.Priority = p
	}
	return j
}

// parseFailures decodes the errs field; nil when it is malformed.
func parseFailures(s string) []Failure {
	var raw []struct {
		At      int64  `json:"at"`
		Attempt int    `json:"attempt"`
		Error   string `json:"error"`
	}
	if json.Unmarshal([]byte(s), &raw) != nil {
		return nil
	}
	out := make([]Failure, len(raw))
	for i, r := range raw {
		out[i] = Failure{At: time.UnixMilli(r.At), Attempt: r.Attempt, Error: r.Error}
	}
	return out
}

// traceID returns the trace ID of a W3C traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"), or "".
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) < 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// matches reports whether j passes o's header, payload, kind, tag and
// dead-letter filters.
func matches(j *Job, o *ListOptions) bool {
	if (o.State == StateDead || o.State == StateCancelled) && !o.Dead.match(j) {
		return false
	}
	if o.Kind != "" && j.Kind != o.Kind {
		return false
	}
	for _, t := range o.Tags {
		if !slices.Contains(j.Tags, t) {
			return false
		}
	}
	for k, v := range o.Header {
		if got, ok := j.Headers[k]; !ok || got != v {
			return false
		}
	}
	return o.Grep == "" || bytes.Contains(j.Payload, []byte(o.Grep))
}

// retrying reports whether a delayed copy is a retry (it carries attempts
// or an error) rather than a scheduled job.
func retrying(j *Job) bool { return j.Attempt > 0 || j.LastError != "" || len(j.Errors) > 0 }

// deadJob builds a Job from a dead letter.
func deadJob(values map[string]any, entryID string) Job {
	d, own := wire.ParseDeadLetter(values)
	vals := make(map[string]any, len(own))
	for k, v := range own {
		vals[k] = v
	}
	j := jobFrom(vals, entryID)
	if own[fieldJobID] == "" && d.ID != "" {
		j.ID = d.ID // a first copy's stable ID is its own entry ID
	}
	j.State = StateDead
	if d.Reason == reasonCancel {
		j.State = StateCancelled
	}
	j.Reason = d.Reason
	j.Attempt = d.Attempts
	j.DeadAt = d.Failed
	if d.Error != "" {
		j.LastError = d.Error
	}
	return j
}

// streamID reports whether s is a valid stream entry ID ("<ms>-<seq>" or
// "<ms>").
func streamID(s string) bool { return rdb.StreamID(s) }

func digits(s string) bool { return rdb.Decimal(s) }

// idLess compares stream IDs.
func idLess(a, b string) bool {
	ams, aseq, _ := strings.Cut(a, "-")
	bms, bseq, _ := strings.Cut(b, "-")
	if len(ams) != len(bms) {
		return len(ams) < len(bms)
	}
	if ams != bms {
		return ams < bms
	}
	if len(aseq) != len(bseq) {
		return len(aseq) < len(bseq)
	}
	return aseq < bseq
}

// idTime returns the time in a stream ID.
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// memberID returns the job ID of a priority set member
// "<seq>:<score>:<id>" (a lease member carries "|<token>" after it).
func memberID(m string) string {
	if i := strings.LastIndexByte(m, '|'); i >= 0 {
		m = m[:i]
	}
	parts := strings.SplitN(m, ":", 3)
	if len(parts) != 3 {
		return ""
	}
	return parts[2]
}

// setPriority sets the priority of a job of a priority set from its member
// "<seq>:<score>:<id>" when its data carries no priority header: the score
// is -priority (a queue with QueueConfig.LowerFirst stores +priority, and
// shows here with the sign reversed).
func setPriority(j *Job, member string) {
	if _, ok := j.Headers[headerPriority]; ok {
		return
	}
	parts := strings.SplitN(member, ":", 3)
	if len(parts) != 3 {
		return
	}
	if s, err := strconv.ParseInt(parts[1], 10, 64); err == nil {
		j.Priority = -s
	}
}

// leaseOwner returns the worker of a lease member "<member>|<worker>:<run>.<pop>:<n>".
func leaseOwner(lm string) string {
	i := strings.LastIndexByte(lm, '|')
	if i < 0 {
		return ""
	}
	tok := lm[i+1:]
	for range 2 {
		if j := strings.LastIndexByte(tok, ':'); j >= 0 {
			tok = tok[:j]
		}
	}
	return tok
}
