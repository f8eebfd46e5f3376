// Package keyaudit checks, while a package's tests run, that no script of
// streamq touches a key it does not declare unless it has a slot probe.
//
// A MONITOR connection to the tests' own Redis sees every command, those
// that scripts run included ("[0 lua]" lines, right after the script's
// EVALSHA). A script that touches a key it does not declare must start
// with the slot probe on a Cluster (see slotProbe in internal/rdb): the
// audit fails the test binary if any other script does, naming it and the
// keys. It is how a new script that derives a key, without the probe, is
// caught before a slot migration finds it. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.RunAround(m, keyaudit.Around(rdb.Scripts()))) }
package keyaudit

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Around returns the watcher for redistest.RunAround that audits the
// scripts of scripts (rdb.Scripts: a name with a twin named name+"@cluster"
// has the slot probe). It starts the audit on the tests' Redis and returns
// its check. A shared server (REDIS_ADDR) is not audited: other packages'
// commands would be in its feed.
func Around(scripts map[string]*redis.Script) func(addr string, private bool) func() error {
	return func(addr string, private bool) func() error {
		if !private {
			fmt.Fprintln(os.Stderr, "keyaudit: the audit of the keys scripts touch needs the tests' own Redis; skipped with REDIS_ADDR")
			return nil
		}
		a, err := newKeyAudit(addr, scripts)
		if err != nil {
			return func() error { return fmt.Errorf("keyaudit: %w", err) }
		}
		return a.check
	}
}

// keyAudit reads one MONITOR feed.
type keyAudit struct {
	conn    net.Conn
	admin   *redis.Client
	marker  string
	allowed map[string]bool   // SHA1s of the scripts with a slot probe
	names   map[string]string // SHA1 -> name in Scripts
	specs   map[string]*redis.CommandInfo
	done    chan struct{}

	mu        sync.Mutex
	err       error
	luaCmds   int
	undecl    map[string]map[string]int // SHA1 -> "COMMAND key" -> count
	sawMarker bool
}

func newKeyAudit(addr string, scripts map[string]*redis.Script) (*keyAudit, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	a := &keyAudit{
		conn:    conn,
		admin:   redis.NewClient(&redis.Options{Addr: addr}),
		marker:  fmt.Sprintf("streamq-key-audit-end-%d-%d", os.Getpid(), time.Now().UnixNano()),
		allowed: map[string]bool{},
		names:   map[string]string{},
		undecl:  map[string]map[string]int{},
		done:    make(chan struct{}),
	}
	for name, s := range scripts {
		a.names[s.Hash()] = name
		if c, ok := scripts[name+"@cluster"]; ok {
			a.allowed[s.Hash()], a.allowed[c.Hash()] = true, true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a.specs, err = a.admin.Command(ctx).Result(); err != nil {
		a.close()
		return nil, fmt.Errorf("COMMAND: %w", err)
	}
	r := bufio.NewReaderSize(conn, 1<<20)
	if _, err := fmt.Fprint(conn, "MONITOR\r\n"); err != nil {
		a.close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		a.close()
		return nil, fmt.Errorf("MONITOR = %q, %v", line, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	go a.read(r)
	return a, nil
}

func (a *keyAudit) close() {
	_ = a.conn.Close()
	_ = a.admin.Close()
}

// read follows the feed until the marker or an error.
func (a *keyAudit) read(r *bufio.Reader) {
	defer close(a.done)
	var sha string
	var declared map[string]bool
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			a.fail(fmt.Errorf("reading the MONITOR feed: %w", err))
			return
		}
		if strings.Contains(line, a.marker) {
			a.mu.Lock()
			a.sawMarker = true
			a.mu.Unlock()
			return
		}
		open, shut := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
		if !strings.HasPrefix(line, "+") || open < 0 || shut < open {
			continue
		}
		args, err := monitorArgs(strings.TrimRight(line[shut+1:], "\r\n"))
		if err != nil || len(args) == 0 {
			a.fail(fmt.Errorf("cannot parse MONITOR line %q: %v", line, err))
			return
		}
		cmd := strings.ToLower(args[0])
		if !strings.HasSuffix(line[open:shut], " lua") {
			sha, declared = "", nil
			if (cmd == "evalsha" || cmd == "eval" || cmd == "evalsha_ro" || cmd == "eval_ro") && len(args) >= 3 {
				sha = args[1]
				if strings.HasPrefix(cmd, "eval") && !strings.HasPrefix(cmd, "evalsha") {
					h := sha1.Sum([]byte(args[1]))
					sha = hex.EncodeToString(h[:])
				}
				n, _ := strconv.Atoi(args[2])
				declared = make(map[string]bool, n)
				for _, k := range args[3:min(3+n, len(args))] {
					declared[k] = true
				}
			}
			continue
		}
		if declared == nil {
			continue
		}
		keys, err := a.keysOf(args)
		if err != nil {
			a.fail(err)
			return
		}
		a.mu.Lock()
		a.luaCmds++
		for _, k := range keys {
			if !declared[k] {
				m := a.undecl[sha]
				if m == nil {
					m = map[string]int{}
					a.undecl[sha] = m
				}
				m[strings.ToUpper(cmd)+" "+k]++
			}
		}
		a.mu.Unlock()
	}
}

// keysOf returns the keys of one command, by its key specification, or by
// COMMAND GETKEYS for a command whose keys move with its arguments.
func (a *keyAudit) keysOf(args []string) ([]string, error) {
	spec := a.specs[strings.ToLower(args[0])]
	if spec == nil {
		return nil, fmt.Errorf("unknown command %q in a script", args[0])
	}
	movable := false
	for _, f := range spec.Flags {
		movable = movable || f == "movablekeys"
	}
	if spec.FirstKeyPos == 0 && !movable {
		// No key by its specification, unless it is a container whose
		// subcommands have keys (XINFO STREAM <key>, XGROUP CREATE <key>).
		if len(args) < 3 || !containers[strings.ToLower(args[0])] {
			return nil, nil
		}
		movable = true
	}
	if !movable {
		last := int(spec.LastKeyPos)
		if last < 0 {
			last += len(args)
		}
		var keys []string
		for i := int(spec.FirstKeyPos); i <= last && i < len(args); i += int(spec.StepCount) {
			keys = append(keys, args[i])
		}
		return keys, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in := make([]any, len(args))
	for i, s := range args {
		in[i] = s
	}
	keys, err := a.admin.CommandGetKeys(ctx, in...).Result()
	if err != nil && strings.Contains(err.Error(), "no key arguments") {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("COMMAND GETKEYS %q: %w", args, err)
	}
	return keys, nil
}

// containers are the commands a script may run whose subcommands name keys.
var containers = map[string]bool{"xinfo": true, "xgroup": true, "object": true, "memory": true}

func (a *keyAudit) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
}

// check ends the audit: it waits until the feed has shown every command
// sent before it (an ECHO of the marker), then reports the scripts without
// a slot probe that touched keys they do not declare.
func (a *keyAudit) check() error {
	defer a.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.admin.Echo(ctx, a.marker).Err(); err != nil {
		return fmt.Errorf("keyaudit: %w", err)
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return fmt.Errorf("keyaudit: the MONITOR feed did not reach the end marker within a minute")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return fmt.Errorf("keyaudit: %w", a.err)
	}
	if !a.sawMarker {
		return fmt.Errorf("keyaudit: the MONITOR feed ended before the end marker")
	}
	var bad []string
	for sha, m := range a.undecl {
		if a.allowed[sha] {
			continue
		}
		name := a.names[sha]
		if name == "" {
			name = "a script not in rdb.Scripts (SHA1 " + sha + ")"
		}
		var what []string
		for k := range m {
			what = append(what, k)
		}
		sort.Strings(what)
		bad = append(bad, fmt.Sprintf("%s: %s", name, strings.Join(what[:min(len(what), 5)], ", ")))
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("keyaudit: scripts touched keys they do not declare and have no slot probe (make them with newProbed in internal/rdb, or declare the keys):\n  %s",
			strings.Join(bad, "\n  "))
	}
	if os.Getenv("STREAMQ_KEY_AUDIT_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "keyaudit: %d commands of scripts checked; %d probed scripts touched undeclared keys\n", a.luaCmds, len(a.undecl))
	}
	return nil
}

// monitorArgs splits the arguments of a MONITOR line: each in double
// quotes, escaped as Redis's sdscatrepr does (\\ \" \n \r \t \a \b \xhh).
func monitorArgs(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, fmt.Errorf("argument at %d does not start with a quote", i)
		}
		var b strings.Builder
		i++
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' || i+1 >= len(s) {
				b.WriteByte(s[i])
				continue
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return nil, fmt.Errorf("short \\x escape at %d", i)
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return nil, err
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(s[i])
			}
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated argument")
		}
		i++ // the closing quote
		out = append(out, b.String())
	}
	return out, nil
}
