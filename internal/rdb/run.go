package rdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/streamqtype"
)

// Replicas asks a write to return only once that many replicas acknowledged
// it (WAIT on the connection that wrote, right after the script).
type Replicas struct {
	N       int           // replicas that must acknowledge; 0: do not wait
	Timeout time.Duration // how long WAIT may block
	// Retry is how long a write that too few replicas acknowledged, or that
	// failed as writes do during a failover (see transient), is sent again
	// with its memo, until it is replicated; 0: not at all. See
	// [Queue.untilReplicated].
	Retry time.Duration
}

// Backoff between two sends of a write that waits for replicas (see
// [Queue.untilReplicated]); each send that reaches the master also waits
// up to Replicas.Timeout in WAIT.
const (
	replicaRetryFirst = 50 * time.Millisecond
	replicaRetryMax   = 500 * time.Millisecond
)

// Recovery budget on Redis Cluster (see Queue.redo).
const (
	// redoFor bounds the retries of one call: a failover of a master takes
	// its replica about cluster-node-timeout plus a second or two.
	redoFor = 10 * time.Second
	// redoFirst and redoMax bound the backoff between two of them.
	redoFirst = 10 * time.Millisecond
	redoMax   = 500 * time.Millisecond
)

// Heal makes a Redis Cluster client reload its slot map at once when err
// says the map is stale or a master is gone: a refused or broken
// connection, CLUSTERDOWN, MOVED, READONLY, MASTERDOWN. go-redis otherwise
// reloads it only every ClusterStateReloadInterval (a minute), and a master
// that died keeps its slots in the client's map until then; go-redis
// coalesces reloads (one at a time, 200 ms apart). Other clients and errors
// are left alone. It reports whether err is such an error.
func Heal(ctx context.Context, c any, err error) bool {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || err == nil || !transient(err) {
		return false
	}
	if !redis.HasErrorPrefix(err, "TRYAGAIN") && !redis.HasErrorPrefix(err, "ASK") {
		cc.ReloadState(ctx)
	}
	return true
}

// redo runs call, and on a Redis Cluster client runs it again while it
// fails with an error that the cluster clears by itself within seconds
// (see [Heal]; also TRYAGAIN, which a multi-key script gets while its
// slot migrates), reloading the slot map and backing off from 10 ms to
// 500 ms, for up to 10 s (by the queue's clock) or until ctx ends. Every
// send of a write carries the same memo, so running it again is safe.
// Other clients run call once: go-redis's own retries are all they need.
func (q *Queue) redo(ctx context.Context, call func() error) error {
	if _, ok := q.client.(*redis.ClusterClient); !ok {
		return call()
	}
	deadline := q.clock.Now().Add(redoFor)
	delay := redoFirst
	for {
		err := call()
		if err == nil || !Heal(ctx, q.client, err) || q.clock.Now().Add(delay).After(deadline) {
			return err
		}
		if !sleep(ctx, delay) {
			return err
		}
		delay = min(2*delay, redoMax)
	}
}

// sleep waits for d, or until ctx ends; it reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Transient reports whether err is one that Redis clears by itself within
// seconds (see transient): a caller holding a job may wait it out.
func Transient(err error) bool { return transient(err) }

// transient reports errors that a cluster clears by itself: connection
// failures (the node is down or failing over) and the replies Redis gives
// while slots move or masters change.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	for _, p := range []string{"TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK", "READONLY", "MASTERDOWN", "LOADING"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.As(err, &ne):
		return true
	}
	return strings.Contains(err.Error(), "connection refused")
}

// runWrite runs write script s for one call of the queue: with the call's
// memo (so a re-sent call changes nothing more), again on a cluster's
// transient errors ([Queue.redo]), and followed by WAIT when rep asks for
// replicas. A write that was not replicated in time returns its reply and
// a [*streamqtype.NotReplicatedError]. The memo hash is appended to keys,
// its token and TTL to args.
func (q *Queue) runWrite(ctx context.Context, s *redis.Script, m Memo, rep Replicas, keys []string, args []any) (*redis.Cmd, error) {
	return q.runScript(ctx, s, m, rep, m.keys(keys...), m.args(args...))
}

// runScript is runWrite for a script whose keys and args already hold
// the memo's.
func (q *Queue) runScript(ctx context.Context, s *redis.Script, m Memo, rep Replicas, keys []string, args []any) (*redis.Cmd, error) {
	c := q.client
	var cmd *redis.Cmd
	var werr error
	send := func() error {
		if rep.N <= 0 {
			cmd = s.Run(ctx, c, keys, args...)
			return cmd.Err()
		}
		cmd, werr = runWait(ctx, c, s, rep, keys, args)
		return cmd.Err()
	}
	var err error
	if rep.N > 0 && rep.Retry > 0 {
		err = q.untilReplicated(ctx, rep, m, func() (error, error) { return send(), werr })
	} else {
		err = q.redo(ctx, send)
	}
	if err != nil {
		return cmd, nil
	}
	m.done()
	return cmd, werr
}

// untilReplicated runs send (one send of a write and its WAIT, which
// returns the write's error and the WAIT's) again while the write fails
// with a transient error (a lost connection, READONLY from a master that
// was demoted, see [transient]; NOREPLICAS from a master whose
// min-replicas-to-write is not met) or the WAIT with too few replicas, backing
// off from 50 ms to 500 ms, until rep.Retry has passed (at least redoFor on
// a Redis Cluster), or ctx ends; and then returns the write's last error
// (the caller reads the WAIT's). This is how a replicated write rides a
// failover: the new master has no replica until the old one resyncs from
// it, seconds later, and a write the old master took after the promotion
// is discarded by that resync.
//
// Every send carries the call's memo, so the job is stored once on the
// master that has it: a send that finds its token answers the first reply
// and writes the token again, so that its WAIT waits for the first send's
// writes too. After each send that ran, the memo hash's TTL is set again,
// so that the token outlives the retries (the hash's TTL is otherwise
// counted from its bucket's start, see MemoWindow).
func (q *Queue) untilReplicated(ctx context.Context, rep Replicas, m Memo, send func() (error, error)) error {
	budget := rep.Retry
	if _, ok := q.client.(*redis.ClusterClient); ok {
		budget = max(budget, redoFor)
	}
	deadline := time.Now().Add(budget)
	delay := replicaRetryFirst
	for {
		err, werr := send()
		if err == nil && werr == nil {
			return nil
		}
		// NOREPLICAS: the master's min-replicas-to-write refused the write,
		// as a new master does until its replicas are back.
		if err != nil && !Heal(ctx, q.client, err) && !transient(err) && !redis.HasErrorPrefix(err, "NOREPLICAS") {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		if err == nil {
			// The script ran: keep its token for the next sends. An error
			// here shows again in the next send, which the loop handles.
			_ = q.client.PExpire(ctx, m.Key, memoTTL).Err()
		}
		if !sleep(ctx, min(delay, left)) {
			return err
		}
		delay = min(2*delay, replicaRetryMax)
	}
}

// runWait sends the script and WAIT in one pipeline, on one connection of
// the master that serves keys, so that WAIT waits for the script's writes.
func runWait(ctx context.Context, c redis.Scripter, s *redis.Script, rep Replicas, keys []string, args []any) (*redis.Cmd, error) {
	var pipeline func() redis.Pipeliner
	switch cc := c.(type) {
	case *redis.ClusterClient:
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd, nil
		}
		pipeline = node.Pipeline
	case interface{ Pipeline() redis.Pipeliner }:
		pipeline = cc.Pipeline
	default:
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("cannot wait for replicas with a %T: use a redis.Client, a failover client or a cluster client", c))
		return cmd, nil
	}
	send := func(eval bool) (*redis.Cmd, *redis.IntCmd) {
		pipe := pipeline()
		var cmd *redis.Cmd
		if eval {
			cmd = s.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = s.EvalSha(ctx, pipe, keys, args...)
		}
		wait := redis.NewIntCmd(ctx, "wait", rep.N, rep.Timeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx) // errors are in the commands
		return cmd, wait
	}
	cmd, wait := send(false)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = send(true)
	}
	if cmd.Err() != nil {
		return cmd, nil
	}
	if err := wait.Err(); err != nil {
		return cmd, fmt.Errorf("%w: WAIT failed: %w", streamqtype.ErrNotReplicated, err)
	}
	if n := int(wait.Val()); n < rep.N {
		return cmd, &streamqtype.NotReplicatedError{Acked: n, Want: rep.N, Timeout: rep.Timeout}
	}
	return cmd, nil
}

// ReplicasProblem returns what is wrong with waiting for n replicas for
// up to timeout on client c, in the words of field (e.g.
// "ProducerConfig.MinReplicas"), or "" when nothing is.
func ReplicasProblem(c any, n int, timeout time.Duration) (field, reason string) {
	switch {
	case n < 0:
		return "MinReplicas", fmt.Sprintf("%d is negative: use 0 not to wait for replicas, or the number that must hold a job", n)
	case timeout < time.Millisecond:
		return "ReplicaTimeout", fmt.Sprintf("%s: use at least 1ms, or 0 for the default", timeout)
	case n == 0:
		return "", ""
	}
	var read time.Duration
	switch cc := c.(type) {
	case *redis.Client:
		read = cc.Options().ReadTimeout
	case *redis.ClusterClient:
		read = cc.Options().ReadTimeout
	default:
		return "MinReplicas", fmt.Sprintf("cannot wait for replicas with a %T: use a redis.Client, a failover client or a cluster client", c)
	}
	if read == 0 {
		read = 3 * time.Second // go-redis's default
	}
	if read > 0 && timeout >= read {
		return "ReplicaTimeout", fmt.Sprintf("%s is not shorter than the client's ReadTimeout (%s), which would cut WAIT short: lower it, or raise the client's ReadTimeout", timeout, read)
	}
	return "", ""
}
