package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
)

func newDashCmd(a *app) *cobra.Command {
	var refresh time.Duration
	cmd := &cobra.Command{
		Use:   "dash",
		Short: "Interactive terminal view: queues, their jobs by state, one job; pause, retry, delete, cancel",
		Long: `An interactive view of the queues in the terminal, refreshed every --refresh:
the queues with their counts; a queue's jobs by state; one job with its
payload, headers and errors. Keys (? shows them all):

  up/down, k/j    move          enter   open         esc   back
  tab, shift+tab  next/previous state (also right/left, l/h)
  p               pause or resume the queue
  r               retry: run a delayed or retrying job now, requeue a dead letter
  d               delete the job (asks y/n)
  c               cancel the running job (asks y/n)
  R               refresh now  q  quit

It needs a terminal; the other commands print tables or JSON for scripts.`,
		Example: `  streamq dash
  streamq --prefix myapp dash --refresh 5s`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if refresh < 500*time.Millisecond {
				return usagef("--refresh %s: use at least 500ms", refresh)
			}
			in, err := a.inspector(cmd)
			if err != nil {
				return err
			}
			if !a.stdinTTY || !a.stdoutTTY {
				return usagef("dash needs a terminal on stdin and stdout: use 'streamq watch' or 'streamq queues' in scripts")
			}
			m := newDashModel(in, a.conn.prefix, a.timeout, refresh)
			p := tea.NewProgram(m, tea.WithContext(cmd.Context()), tea.WithInput(a.stdin), tea.WithOutput(a.stdout), tea.WithAltScreen())
			_, err = p.Run()
			if errors.Is(err, tea.ErrProgramKilled) && cmd.Context().Err() != nil {
				return nil // interrupted
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&refresh, "refresh", 2*time.Second, "how often the view reads Redis again")
	return cmd
}

// screen is what the view shows.
type screen int

const (
	screenQueues screen = iota // every queue with its counts
	screenJobs                 // one queue's jobs in one state
	screenJob                  // one job
)

// dashStates are the states the jobs screen pages through.
var dashStates = []inspect.State{inspect.StateWaiting, inspect.StateRunning, inspect.StateDelayed,
	inspect.StateRetrying, inspect.StateDead, inspect.StateCancelled, inspect.StateCompleted}

// dashPage is the most jobs the jobs screen lists.
const dashPage = 100

// dashKeys are the key bindings, with their help.
type dashKeys struct {
	Up, Down, Open, Back, Next, Prev            key.Binding
	Pause, Retry, Delete, Cancel, Refresh, Help key.Binding
	Quit                                        key.Binding
}

func newDashKeys() dashKeys {
	return dashKeys{
		Up:      key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:    key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		Open:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open")),
		Back:    key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back")),
		Next:    key.NewBinding(key.WithKeys("tab", "right", "l"), key.WithHelp("tab/→", "next state")),
		Prev:    key.NewBinding(key.WithKeys("shift+tab", "left", "h"), key.WithHelp("shift+tab/←", "previous state")),
		Pause:   key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause/resume")),
		Retry:   key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "retry (run now, requeue)")),
		Delete:  key.NewBinding(key.WithKeys("d"), key.WithHelp("d", "delete job")),
		Cancel:  key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "cancel running job")),
		Refresh: key.NewBinding(key.WithKeys("R"), key.WithHelp("R", "refresh")),
		Help:    key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "all keys")),
		Quit:    key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
	}
}

// ShortHelp is the key help under the view.
func (k dashKeys) ShortHelp() []key.Binding {
	return []key.Binding{k.Open, k.Back, k.Next, k.Pause, k.Retry, k.Delete, k.Help, k.Quit}
}

// FullHelp is the key help ? shows.
func (k dashKeys) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.Open, k.Back},
		{k.Next, k.Prev, k.Refresh},
		{k.Pause, k.Retry, k.Delete, k.Cancel},
		{k.Help, k.Quit},
	}
}

// dashModel is the Bubble Tea model of streamq dash.
type dashModel struct {
	in      *inspect.Inspector
	prefix  string
	timeout time.Duration
	refresh time.Duration // 0: no automatic refresh (tests)
	keys    dashKeys
	help    help.Model
	width   int

	screen  screen
	queues  []*inspect.Overview
	qCursor int

	queue    *inspect.Queue
	overview *inspect.Overview
	state    int // index in dashStates
	jobs     []inspect.Job
	more     bool // more jobs than listed
	jCursor  int

	job *inspect.Job

	confirm *dashAction // an action waiting for y
	status  string      // what the last action did
	err     error       // the last failed read or action
}

// dashAction is an action on the selected job, asked for with y/n.
type dashAction struct {
	prompt string
	run    func(ctx context.Context) (string, error)
}

// Messages of the model's commands.
type (
	queuesMsg struct {
		ovs []*inspect.Overview
		err error
	}
	jobsMsg struct {
		queue string
		state inspect.State
		ov    *inspect.Overview
		page  *inspect.Page
		err   error
	}
	jobMsg struct {
		job *inspect.Job
		err error
	}
	actionMsg struct {
		status string
		err    error
	}
	tickMsg struct{}
)

func newDashModel(in *inspect.Inspector, prefix string, timeout, refresh time.Duration) *dashModel {
	return &dashModel{in: in, prefix: prefix, timeout: timeout, refresh: refresh, keys: newDashKeys(), help: help.New()}
}

// Init reads the queues and starts the refresh.
func (m *dashModel) Init() tea.Cmd {
	return tea.Batch(m.loadQueues(), m.tick())
}

func (m *dashModel) tick() tea.Cmd {
	if m.refresh <= 0 {
		return nil
	}
	return tea.Tick(m.refresh, func(time.Time) tea.Msg { return tickMsg{} })
}

// call returns the context of one Redis call.
func (m *dashModel) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.timeout)
}

func (m *dashModel) loadQueues() tea.Cmd {
	in := m.in
	return func() tea.Msg {
		ctx, cancel := m.call()
		defer cancel()
		qs, err := in.Queues(ctx)
		if err != nil {
			return queuesMsg{err: err}
		}
		out := make([]*inspect.Overview, 0, len(qs))
		for _, info := range qs {
			q, err := in.Queue(ctx, info.Name)
			if err != nil {
				return queuesMsg{err: err}
			}
			o, err := q.Overview(ctx)
			if err != nil {
				return queuesMsg{err: err}
			}
			out = append(out, o)
		}
		return queuesMsg{ovs: out}
	}
}

func (m *dashModel) loadJobs() tea.Cmd {
	q, st := m.queue, dashStates[m.state]
	return func() tea.Msg {
		ctx, cancel := m.call()
		defer cancel()
		ov, err := q.Overview(ctx)
		if err != nil {
			return jobsMsg{queue: q.Name(), state: st, err: err}
		}
		page, err := q.Jobs(ctx, inspect.ListOptions{State: st, Limit: dashPage})
		return jobsMsg{queue: q.Name(), state: st, ov: ov, page: page, err: err}
	}
}

func (m *dashModel) loadJob(id string) tea.Cmd {
	q := m.queue
	return func() tea.Msg {
		ctx, cancel := m.call()
		defer cancel()
		j, err := q.Job(ctx, id)
		return jobMsg{job: j, err: err}
	}
}

// reload reads again what the screen shows.
func (m *dashModel) reload() tea.Cmd {
	switch m.screen {
	case screenJobs:
		return m.loadJobs()
	case screenJob:
		if m.job != nil {
			return m.loadJob(m.job.ID)
		}
	}
	return m.loadQueues()
}

// Update handles keys, window sizes and the replies of the commands.
func (m *dashModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width = msg.Width
		m.help.Width = msg.Width
	case tickMsg:
		return m, tea.Batch(m.reload(), m.tick())
	case queuesMsg:
		m.err = msg.err
		if msg.err == nil {
			m.queues = msg.ovs
			m.qCursor = clamp(m.qCursor, len(m.queues))
		}
	case jobsMsg:
		if m.queue == nil || msg.queue != m.queue.Name() || msg.state != dashStates[m.state] {
			return m, nil // an answer for a screen left meanwhile
		}
		m.err = msg.err
		if msg.err == nil {
			m.overview, m.jobs, m.more = msg.ov, msg.page.Jobs, msg.page.Cursor != ""
			m.jCursor = clamp(m.jCursor, len(m.jobs))
		}
	case jobMsg:
		m.err = msg.err
		if msg.err == nil && m.screen == screenJob {
			m.job = msg.job
		}
	case actionMsg:
		m.status, m.err = msg.status, msg.err
		return m, m.reload()
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

// key handles a key press.
func (m *dashModel) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if m.confirm != nil {
		a := m.confirm
		m.confirm = nil
		if k.String() != "y" {
			m.status = "not done"
			return m, nil
		}
		return m, m.act(a.run)
	}
	switch {
	case key.Matches(k, m.keys.Quit):
		return m, tea.Quit
	case key.Matches(k, m.keys.Help):
		m.help.ShowAll = !m.help.ShowAll
	case key.Matches(k, m.keys.Refresh):
		return m, m.reload()
	case key.Matches(k, m.keys.Up):
		m.move(-1)
	case key.Matches(k, m.keys.Down):
		m.move(1)
	case key.Matches(k, m.keys.Open):
		return m, m.open()
	case key.Matches(k, m.keys.Back):
		return m, m.back()
	case key.Matches(k, m.keys.Next), key.Matches(k, m.keys.Prev):
		if m.screen != screenJobs {
			return m, nil
		}
		step := 1
		if key.Matches(k, m.keys.Prev) {
			step = len(dashStates) - 1
		}
		m.state = (m.state + step) % len(dashStates)
		m.jobs, m.jCursor = nil, 0
		return m, m.loadJobs()
	case key.Matches(k, m.keys.Pause):
		return m, m.pause()
	case key.Matches(k, m.keys.Retry):
		return m, m.retry()
	case key.Matches(k, m.keys.Delete):
		m.ask("delete", func(ctx context.Context, q *inspect.Queue, id string) (string, error) {
			return "deleted job " + id, q.Delete(ctx, id)
		})
	case key.Matches(k, m.keys.Cancel):
		m.ask("cancel", func(ctx context.Context, q *inspect.Queue, id string) (string, error) {
			return "cancel requested for job " + id, q.Cancel(ctx, id)
		})
	}
	return m, nil
}

func (m *dashModel) move(d int) {
	switch m.screen {
	case screenQueues:
		m.qCursor = clamp(m.qCursor+d, len(m.queues))
	case screenJobs:
		m.jCursor = clamp(m.jCursor+d, len(m.jobs))
	}
}

// clamp keeps i within a list of n items (0 when it is empty).
func clamp(i, n int) int {
	return max(0, min(i, n-1))
}

func (m *dashModel) open() tea.Cmd {
	switch m.screen {
	case screenQueues:
		if len(m.queues) == 0 {
			return nil
		}
		ctx, cancel := m.call()
		defer cancel()
		q, err := m.in.Queue(ctx, m.queues[m.qCursor].Name)
		if err != nil {
			m.err = err
			return nil
		}
		m.screen, m.queue, m.overview = screenJobs, q, m.queues[m.qCursor]
		m.state, m.jobs, m.jCursor, m.status = 0, nil, 0, ""
		return m.loadJobs()
	case screenJobs:
		if j := m.selected(); j != nil {
			m.screen, m.job = screenJob, j
			return m.loadJob(j.ID)
		}
	}
	return nil
}

func (m *dashModel) back() tea.Cmd {
	switch m.screen {
	case screenJob:
		m.screen, m.job = screenJobs, nil
		return m.loadJobs()
	case screenJobs:
		m.screen, m.queue, m.jobs = screenQueues, nil, nil
		return m.loadQueues()
	}
	return nil
}

// selected is the job the cursor (or the job screen) is on, if any.
func (m *dashModel) selected() *inspect.Job {
	switch m.screen {
	case screenJob:
		return m.job
	case screenJobs:
		if len(m.jobs) > 0 {
			j := m.jobs[m.jCursor]
			return &j
		}
	}
	return nil
}

// act runs an action and reports what it did.
func (m *dashModel) act(run func(ctx context.Context) (string, error)) tea.Cmd {
	m.status = "working…"
	return func() tea.Msg {
		ctx, cancel := m.call()
		defer cancel()
		status, err := run(ctx)
		if err != nil {
			return actionMsg{err: err}
		}
		return actionMsg{status: status}
	}
}

// pause pauses or resumes the selected (or open) queue.
func (m *dashModel) pause() tea.Cmd {
	var name string
	var paused bool
	switch {
	case m.screen == screenQueues && len(m.queues) > 0:
		name, paused = m.queues[m.qCursor].Name, m.queues[m.qCursor].Paused
	case m.screen != screenQueues && m.overview != nil:
		name, paused = m.queue.Name(), m.overview.Paused
	default:
		return nil
	}
	in := m.in
	return m.act(func(ctx context.Context) (string, error) {
		q, err := in.Queue(ctx, name)
		if err != nil {
			return "", err
		}
		if paused {
			return "resumed " + name, q.Resume(ctx)
		}
		return "paused " + name + ": consumers finish their running jobs and take no new ones", q.Pause(ctx)
	})
}

// retry runs a delayed or retrying job now, or requeues a dead letter.
func (m *dashModel) retry() tea.Cmd {
	j, q := m.selected(), m.queue
	if j == nil {
		return nil
	}
	id := j.ID
	switch j.State {
	case inspect.StateDelayed, inspect.StateRetrying:
		return m.act(func(ctx context.Context) (string, error) {
			return "job " + id + " is due now: it joined the end of the waiting jobs", q.RunNow(ctx, id)
		})
	case inspect.StateDead, inspect.StateCancelled:
		return m.act(func(ctx context.Context) (string, error) {
			n, err := q.RequeueDead(ctx, inspect.DeadFilter{IDs: []string{id}}, nil)
			if err == nil && n == 0 {
				err = fmt.Errorf("job %s is no longer a dead letter", id)
			}
			return "requeued job " + id, err
		})
	}
	m.status = fmt.Sprintf("r retries delayed, retrying and dead jobs; job %s is %s", id, j.State)
	return nil
}

// ask asks y/n before doing verb to the selected job.
func (m *dashModel) ask(verb string, do func(ctx context.Context, q *inspect.Queue, id string) (string, error)) {
	j, q := m.selected(), m.queue
	if j == nil {
		return
	}
	id := j.ID
	m.confirm = &dashAction{
		prompt: fmt.Sprintf("%s %s job %s of %s? (y/n)", verb, j.State, id, q.Name()),
		run:    func(ctx context.Context) (string, error) { return do(ctx, q, id) },
	}
}

// Styles of the view.
var (
	dashTitle    = lipgloss.NewStyle().Bold(true)
	dashSelected = lipgloss.NewStyle().Reverse(true)
	dashMuted    = lipgloss.NewStyle().Faint(true)
	dashError    = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	dashAsk      = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("11"))
	dashTab      = lipgloss.NewStyle().Padding(0, 1)
	dashTabOn    = dashTab.Reverse(true)
)

// View draws the screen.
func (m *dashModel) View() string {
	var b strings.Builder
	b.WriteString(dashTitle.Render("streamq dash") + dashMuted.Render(" · prefix "+m.prefix) + "\n\n")
	switch m.screen {
	case screenQueues:
		m.viewQueues(&b)
	case screenJobs:
		m.viewJobs(&b)
	case screenJob:
		m.viewJob(&b)
	}
	b.WriteString("\n")
	switch {
	case m.confirm != nil:
		b.WriteString(dashAsk.Render(m.confirm.prompt) + "\n")
	case m.err != nil:
		b.WriteString(dashError.Render("error: "+m.err.Error()) + "\n")
	case m.status != "":
		b.WriteString(m.status + "\n")
	}
	b.WriteString(m.help.View(m.keys))
	return b.String()
}

func (m *dashModel) viewQueues(b *strings.Builder) {
	if len(m.queues) == 0 {
		b.WriteString(dashMuted.Render("no queues under this prefix yet") + "\n")
		return
	}
	rows := [][]string{{"QUEUE", "KIND", "STATE", "WAITING", "RUNNING", "DELAYED", "RETRYING", "DEAD", "CANCELLED", "CONSUMERS"}}
	for _, o := range m.queues {
		rows = append(rows, []string{cell(o.Name), kindName(o.Kind, o.WriteBehind), state(o.Paused), fmt.Sprint(o.Waiting), fmt.Sprint(o.Running),
			fmt.Sprint(o.Delayed), fmt.Sprint(o.Retrying), fmt.Sprint(o.Dead), fmt.Sprint(o.Cancelled), fmt.Sprint(o.Consumers)})
	}
	writeRows(b, rows, m.qCursor)
}

func (m *dashModel) viewJobs(b *strings.Builder) {
	o := m.overview
	b.WriteString(dashTitle.Render(cell(m.queue.Name())))
	if o != nil {
		fmt.Fprintf(b, " %s, %s, %d consumers", kindName(o.Kind, o.WriteBehind), state(o.Paused), o.Consumers)
	}
	b.WriteString("\n")
	var tabs []string
	for i, st := range dashStates {
		label := string(st)
		if o != nil {
			label += " " + fmt.Sprint(o.Count(st))
		}
		if i == m.state {
			tabs = append(tabs, dashTabOn.Render("["+label+"]"))
		} else {
			tabs = append(tabs, dashTab.Render(label))
		}
	}
	b.WriteString(lipgloss.JoinHorizontal(lipgloss.Top, tabs...) + "\n\n")
	if len(m.jobs) == 0 {
		b.WriteString(dashMuted.Render("no "+string(dashStates[m.state])+" jobs") + "\n")
		return
	}
	rows := [][]string{{"ID", "ATTEMPT", "ENQUEUED", "DUE / RUNNING", "LAST ERROR", "PAYLOAD"}}
	now := time.Now()
	for _, j := range m.jobs {
		when := since(j.DueAt, now)
		if j.State == inspect.StateRunning {
			when = "for " + age(j.RunTime)
		}
		rows = append(rows, []string{j.ID, fmt.Sprint(j.Attempt), since(j.EnqueuedAt, now), when, cut(cell(j.LastError), 40), cut(escape(j.Payload), 50)})
	}
	writeRows(b, rows, m.jCursor)
	if m.more {
		b.WriteString(dashMuted.Render(fmt.Sprintf("the first %d; 'streamq jobs' pages through the rest", dashPage)) + "\n")
	}
}

func (m *dashModel) viewJob(b *strings.Builder) {
	j := m.job
	if j == nil {
		return
	}
	now := time.Now()
	fmt.Fprintf(b, "%s %s of %s\n\n", dashTitle.Render("Job"), j.ID, cell(m.queue.Name()))
	field := func(name, v string) {
		if v != "" && v != "-" {
			fmt.Fprintf(b, "%-12s %s\n", name+":", v)
		}
	}
	field("State", string(j.State)+map[bool]string{true: " (" + j.Reason + ")", false: ""}[j.Reason != ""])
	field("Entry", j.EntryID)
	field("Attempts", fmt.Sprint(j.Attempt))
	field("Enqueued", since(j.EnqueuedAt, now))
	field("Due", since(j.DueAt, now))
	field("Dead since", since(j.DeadAt, now))
	field("Finished", since(j.FinishedAt, now))
	field("Owner", cell(j.Owner))
	field("Last error", cell(j.LastError))
	if j.Progress != nil {
		field("Progress", fmt.Sprintf("%d%% %s", j.Progress.Percent, cell(j.Progress.Message)))
	}
	for k, v := range j.Headers {
		field("Header", cell(k)+": "+cell(v))
	}
	b.WriteString("\nPayload:\n" + cut(escape(j.Payload), 2000) + "\n")
	if j.Result != nil {
		b.WriteString("\nResult:\n" + cut(escape(j.Result), 2000) + "\n")
	}
}

// writeRows writes rows as aligned columns, the first a header, marking
// row selected (counted without the header).
func writeRows(b *strings.Builder, rows [][]string, selected int) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], lipgloss.Width(c))
		}
	}
	for n, r := range rows {
		var line strings.Builder
		for i, c := range r {
			line.WriteString(c + strings.Repeat(" ", widths[i]-lipgloss.Width(c)) + "  ")
		}
		s := strings.TrimRight(line.String(), " ")
		switch {
		case n == 0:
			s = dashMuted.Render(s)
		case n-1 == selected:
			s = dashSelected.Render(s)
		}
		b.WriteString(s + "\n")
	}
}

// cell shows s as escaped text on one line.
func cell(s string) string { return escape([]byte(s)) }

// cut shortens s to at most n runes, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
