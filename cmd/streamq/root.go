package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
)

// commands lists the constructors of streamq's subcommands, in the order
// `streamq -h` shows them. Adding a subcommand is one line here: a function
// that takes the shared *app and returns its *cobra.Command (see
// newQueuesCmd for the pattern: a.inspector(cmd) connects, a.print writes
// the table or the JSON).
var commands = []func(*app) *cobra.Command{
	newQueuesCmd,
	newQueueCmd,
	newStatsCmd,
	newWatchCmd,
	newJobsCmd,
	newJobCmd,
	newPauseCmd,
	newResumeCmd,
	newCancelCmd,
	newDeleteCmd,
	newRunNowCmd,
	newDeadCmd,
	newConsumersCmd,
	newSchedulesCmd,
	newRedisCmd,
	newEnqueueCmd,
	newOutboxCmd,
	newBenchCmd,
	newVersionCmd,
	newDashboardCmd,
	newDashCmd,
	newFlowCmd,
	newPartitionsCmd,
	newWhyCmd,
	newWorkflowCmd,
}

// app is the state every subcommand shares: its streams, the global flags
// and, once a subcommand asked for it, the Redis client.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            func(string) string

	// stdinTTY and stderrTTY say whether stdin and stderr are terminals
	// (confirmation prompts, progress bars, the refreshing watch view).
	stdinTTY, stdoutTTY, stderrTTY bool

	conn    connFlags
	json    bool
	timeout time.Duration

	client redis.UniversalClient // set by connect, closed by run
}

// newRoot returns the root command with every subcommand of commands.
func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "streamq",
		Short: "Operate streamq queues on Redis: inspect, pause, cancel, requeue, enqueue",
		Long: `streamq operates the job queues of github.com/streamq/streamq on Redis: it lists
queues and jobs in every state, pauses and resumes queues, cancels, deletes and
runs jobs, requeues and purges dead letters, and enqueues jobs.

Connection (flags win over the environment):
  --url, REDIS_URL        redis://[user:pass@]host:port[/db], rediss:// (TLS), unix:///path
  --cluster               host:port,... of a Redis Cluster
  --sentinel              master@host:port,... of Redis Sentinels
  --user, --password      or STREAMQ_REDIS_USER, STREAMQ_REDIS_PASSWORD
  REDIS_ADDR (host:port) is read when REDIS_URL is not set; default redis://127.0.0.1:6379.

Output: aligned tables, or one JSON document with --json (JSON lines for watch).
Exit codes: 0 ok, 1 failure, 2 usage (bad flag, argument or filter; a destructive
action without --yes when stdin is not a terminal), 3 queue or job not found.`,
		Example: `  streamq queues
  streamq --url redis://10.0.0.5:6379 jobs orders --state dead --limit 20
  REDIS_URL=rediss://:secret@redis.internal:6380 streamq stats orders --json`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	pf := root.PersistentFlags()
	a.conn.register(pf, a.env)
	pf.BoolVar(&a.json, "json", false, "print one JSON document (JSON lines for watch) instead of a table")
	pf.DurationVar(&a.timeout, "timeout", 10*time.Second, "bound on each Redis call")
	for _, c := range commands {
		root.AddCommand(c(a))
	}
	return root
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, a *app, args []string) int {
	root := newRoot(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if a.client != nil {
		_ = a.client.Close()
	}
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	fmt.Fprintln(a.stderr, "streamq:", strings.TrimPrefix(err.Error(), "streamq: "))
	if code == exitUsage && !errors.Is(err, errNeedYes) {
		fmt.Fprintln(a.stderr, "Run 'streamq <command> -h' for usage.")
	}
	return code
}

// inspector connects (once) and returns an inspector for the global flags.
func (a *app) inspector(cmd *cobra.Command) (*inspect.Inspector, error) {
	c, err := a.connect(cmd.Context())
	if err != nil {
		return nil, err
	}
	return inspect.New(c, &inspect.Options{Prefix: a.conn.prefix, Group: a.conn.group})
}

// queue connects and returns the inspector's view of queue name, with the
// close names in the error when there is no such queue.
func (a *app) queue(cmd *cobra.Command, name string) (*inspect.Queue, error) {
	in, err := a.inspector(cmd)
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	q, err := in.Queue(ctx, name)
	if err != nil {
		return nil, describe(err)
	}
	return q, nil
}

// ctx returns the context of one Redis call, bounded by --timeout.
func (a *app) ctx(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), a.timeout)
}

func main() {
	redis.SetLogger(quietLogger{})
	ctx, stop := signalContext()
	a := &app{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, env: os.Getenv,
		stdinTTY: isTerminal(os.Stdin), stdoutTTY: isTerminal(os.Stdout), stderrTTY: isTerminal(os.Stderr),
	}
	code := run(ctx, a, os.Args[1:])
	stop()
	os.Exit(code)
}
