package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/postgres"
	"github.com/streamq/streamq/outbox/sqlite"
	wbpostgres "github.com/streamq/streamq/writebehind/postgres"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// outboxFlags name the outbox table of the outbox commands.
type outboxFlags struct {
	postgres, sqlite, table string
	prefix                  string // of the flags' names (registerAs)
}

func (f *outboxFlags) register(cmd *cobra.Command) { f.registerAs(cmd, "") }

// registerAs registers the flags with names that start with prefix
// ("outbox-" for --outbox-postgres of the dashboard).
func (f *outboxFlags) registerAs(cmd *cobra.Command, prefix string) {
	f.prefix = prefix
	fs := cmd.Flags()
	fs.StringVar(&f.postgres, prefix+"postgres", "", "PostgreSQL DSN of the database that holds the outbox table")
	fs.StringVar(&f.sqlite, prefix+"sqlite", "", "SQLite file that holds the outbox table")
	fs.StringVar(&f.table, prefix+"table", outbox.DefaultTable, "outbox table")
}

// name labels the table of the flags on the dashboard (never with the
// DSN, which may hold a password).
func (f *outboxFlags) name() string {
	if f.postgres != "" {
		return f.table + " (PostgreSQL)"
	}
	return f.table + " (" + f.sqlite + ")"
}

// outboxStore is the outbox table of the flags.
type outboxStore interface {
	outbox.Store
	Migrate(ctx context.Context) error
}

// open opens the database and the outbox table of the flags; the caller
// closes the database.
func (f *outboxFlags) open() (*sql.DB, outboxStore, error) {
	if (f.postgres == "") == (f.sqlite == "") {
		return nil, nil, usagef("give the outbox's database: --%spostgres DSN or --%ssqlite FILE", f.prefix, f.prefix)
	}
	var db *sql.DB
	var ob outboxStore
	var err error
	if f.postgres != "" {
		if db, err = wbpostgres.Open(f.postgres); err == nil {
			ob, err = postgres.New(db, &postgres.Config{Table: f.table})
		}
	} else if db, err = wbsqlite.Open(f.sqlite); err == nil {
		ob, err = sqlite.New(db, &sqlite.Config{Table: f.table})
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		return nil, nil, usageErr(err)
	}
	return db, ob, nil
}

func newOutboxCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Relay an SQL outbox table to Redis, show its backlog, create it",
		Long: `The transactional outbox (package outbox): jobs written to a table of PostgreSQL
or SQLite in the application's transactions, moved to Redis by relays. Relays
usually run inside the workers (outbox.Relay.Run); 'outbox relay' runs one on
its own. See docs/outbox.md.`,
	}
	cmd.AddCommand(newOutboxStatusCmd(a), newOutboxRelayCmd(a), newOutboxMigrateCmd(a))
	return cmd
}

// outboxQueueJSON is the JSON shape of one queue of outbox status.
type outboxQueueJSON struct {
	Queue     string `json:"queue"`
	Rows      int64  `json:"rows"`
	OldestMS  int64  `json:"oldest_ms"`
	LagMS     int64  `json:"lag_ms"`
	Failing   int64  `json:"failing"`
	LastError string `json:"last_error,omitempty"`
}

// outboxStatusJSON is the JSON shape of outbox status.
type outboxStatusJSON struct {
	Table    string            `json:"table"`
	Rows     int64             `json:"rows"`
	OldestMS int64             `json:"oldest_ms"`
	LagMS    int64             `json:"lag_ms"`
	Failing  int64             `json:"failing"`
	Queues   []outboxQueueJSON `json:"queues"`
}

func newOutboxStatusCmd(a *app) *cobra.Command {
	var f outboxFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the outbox's backlog: rows waiting per queue, the oldest's age, the relays' lag, failing rows",
		Long: `Show what waits in the outbox table: per queue the rows, the age of the
oldest (by the database's clock), the relays' lag (how long the oldest due row
that has not failed has waited), and the rows the relay failed to enqueue,
with the last error (a queue no relay has a producer for, a job over the
queue's limits, a full queue). It reads the database only.
JSON: {"table","rows","oldest_ms","lag_ms","failing","queues":[{"queue","rows","oldest_ms","lag_ms","failing","last_error"}]}`,
		Example: `  streamq outbox status --postgres postgres://app@db:5432/app
  streamq outbox status --sqlite app.db --json`,
		Args: rangeArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, ob, err := f.open()
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			b, err := inspect.OutboxBacklog(ctx, ob)
			if err != nil {
				return err
			}
			out := outboxStatusJSON{Table: f.table, Rows: b.Rows, OldestMS: b.Oldest.Milliseconds(), LagMS: b.Lag.Milliseconds(), Failing: b.Failing, Queues: []outboxQueueJSON{}}
			for _, q := range b.Queues {
				out.Queues = append(out.Queues, outboxQueueJSON{Queue: q.Queue, Rows: q.Rows, OldestMS: q.Oldest.Milliseconds(), LagMS: q.Lag.Milliseconds(), Failing: q.Failing, LastError: q.LastError})
			}
			if a.json {
				return printJSON(a.stdout, out)
			}
			t := newTable(a.stdout, "QUEUE", "ROWS", "OLDEST", "LAG", "FAILING", "LAST ERROR")
			for _, q := range b.Queues {
				t.row(q.Queue, q.Rows, age(q.Oldest), age(q.Lag), q.Failing, q.LastError)
			}
			t.row("(all)", b.Rows, age(b.Oldest), age(b.Lag), b.Failing, "")
			return t.flush()
		},
	}
	f.register(cmd)
	return cmd
}

func newOutboxMigrateCmd(a *app) *cobra.Command {
	var f outboxFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the outbox table and its index if they do not exist (idempotent)",
		Args:  rangeArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, ob, err := f.open()
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if err := ob.Migrate(ctx); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "outbox table %s is ready\n", f.table)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newOutboxRelayCmd(a *app) *cobra.Command {
	var (
		f           outboxFlags
		queues      []string
		batch       int
		poll        time.Duration
		minReplicas int
		once        bool
	)
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Relay the outbox table's rows to their queues until interrupted",
		Long: `Run an outbox relay on its own: claim committed rows of the outbox table,
enqueue each as one job of its queue, and delete it once Redis accepted the job.
Several relays (here and in workers) may run at once. --queue names the queues
to relay (a row of another queue waits, shown failing by 'outbox status').
On PostgreSQL it wakes on LISTEN/NOTIFY and polls every --poll as a fallback;
on SQLite it polls. It stops on SIGINT or SIGTERM, finishing its batch.
--once relays until the table has no due rows of these queues, then exits.
Errors are logged to stderr, and retried.`,
		Example: `  streamq outbox relay --postgres postgres://app@db:5432/app --queue orders --queue mails
  streamq outbox relay --sqlite app.db --queue orders --once`,
		Args: rangeArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(queues) == 0 {
				return usagef("give the queues to relay: --queue NAME (repeat it, or a comma-separated list)")
			}
			db, ob, err := f.open()
			if err != nil {
				return err
			}
			defer db.Close()
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			cfg := outbox.RelayConfig{BatchSize: batch, PollInterval: poll,
				Logger: slog.New(slog.NewTextHandler(a.stderr, nil))}
			for _, name := range queues {
				q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: a.conn.prefix, Group: a.conn.group})
				if err != nil {
					return usageErr(err)
				}
				p, err := streamq.NewProducer(q, &streamq.ProducerConfig{MinReplicas: minReplicas})
				if err != nil {
					return usageErr(err)
				}
				cfg.Producers = append(cfg.Producers, p)
			}
			r, err := outbox.NewRelay(ob, &cfg)
			if err != nil {
				return usageErr(err)
			}
			if !once {
				fmt.Fprintf(a.stderr, "relaying %s of %s to %s; interrupt to stop\n", strings.Join(queues, ", "), f.table, a.conn.prefix)
				return r.Run(cmd.Context())
			}
			total := 0
			for {
				n, err := r.RunOnce(cmd.Context())
				total += n
				if err != nil {
					return err
				}
				if n == 0 {
					fmt.Fprintf(a.stdout, "relayed %d rows\n", total)
					return nil
				}
			}
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringSliceVar(&queues, "queue", nil, "queue to relay (repeat, or comma-separated)")
	fs.IntVar(&batch, "batch", outbox.DefaultBatchSize, "rows claimed at once")
	fs.DurationVar(&poll, "poll", outbox.DefaultPollInterval, "poll interval (PostgreSQL: fallback to LISTEN/NOTIFY)")
	fs.IntVar(&minReplicas, "min-replicas", 0, "replicas that must hold a job before its row is deleted (WAIT)")
	fs.BoolVar(&once, "once", false, "relay until no due row is left, then exit")
	return cmd
}
