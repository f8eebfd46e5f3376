package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/visible"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
)

// exitError is an error with the exit code it ends the program with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks err as a usage error (exit code 2).
func usageErr(err error) error { return &exitError{code: exitUsage, err: err} }

// usagef is usageErr(fmt.Errorf(...)).
func usagef(format string, args ...any) error { return usageErr(fmt.Errorf(format, args...)) }

// exitCode maps an error to the exit code.
func exitCode(err error) int {
	var e *exitError
	switch {
	case errors.As(err, &e):
		return e.code
	case errors.Is(err, inspect.ErrQueueNotFound), errors.Is(err, inspect.ErrJobNotFound):
		return exitNotFound
	}
	// cobra reports an unknown subcommand, an unknown flag before the
	// subcommand is known, and bad positional args as plain errors.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "requires at most", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitFailure
}

// describe turns a not-found error of the inspector into one that names the
// close names, keeping it errors.Is-comparable.
func describe(err error) error {
	var nf *inspect.NotFoundError
	if !errors.As(err, &nf) || nf.What != "queue" && !errors.Is(err, inspect.ErrQueueNotFound) {
		return err
	}
	msg := fmt.Sprintf("queue %q not found", nf.Name)
	if len(nf.Similar) > 0 {
		msg += "; did you mean " + strings.Join(nf.Similar, ", ") + "?"
	}
	msg += " ('streamq queues' lists every queue)"
	return &exitError{code: exitNotFound, err: &wrapped{msg: msg, err: err}}
}

// wrapped is an error with its own message that unwraps to err.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(anySlice(header)...)
	return t
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// row writes one row; text is shown escaped (see escape), so that a name
// with a right-to-left override or a newline cannot disguise itself or the
// table.
func (t *table) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, visible.Escape(fmt.Sprint(c), false))
	}
	fmt.Fprintln(t.tw)
}

func (t *table) flush() error { return t.tw.Flush() }

// age formats a duration for a person: 0s, 45s, 3m12s, 2h05m, 3d04h.
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// since formats how long ago t was ("-" for the zero time).
func since(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(now); d > 0 {
		return "in " + age(d)
	}
	return age(now.Sub(t)) + " ago"
}

// clock formats t in UTC for a table ("-" for the zero time).
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// short cuts s to n runes with an ellipsis, on one line, escaped.
func short(b []byte, n int) string {
	s := escape(b)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// escape shows bytes as one line of text: control characters, characters
// that would not show as themselves (right-to-left overrides, zero-width
// spaces) and bytes that are not UTF-8 are escaped Go-style (\n, \u202e,
// \xff), the rest is shown as it is.
func escape(b []byte) string { return visible.Escape(string(b), false) }

// jsonTime is a time in JSON: RFC 3339 in UTC with milliseconds, omitted when zero.
func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Millisecond)
	return &u
}

// ms is a duration in whole milliseconds, for JSON.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// blob is bytes in JSON: the text when it is valid UTF-8, else base64.
type blob struct {
	Data     string `json:"data"`
	Encoding string `json:"encoding"` // "text" or "base64"
}

func newBlob(b []byte) *blob {
	if b == nil {
		return nil
	}
	if utf8.Valid(b) {
		return &blob{Data: string(b), Encoding: "text"}
	}
	return &blob{Data: base64.StdEncoding.EncodeToString(b), Encoding: "base64"}
}
