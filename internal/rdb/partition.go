package rdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MaxPartitions is the most partitions a queue may have.
const MaxPartitions = 1024

// PartitionSep separates a partitioned queue's name from a partition's
// number in the partition's queue name ("orders#3"). Partition 0 is the
// queue of the base name itself, so a queue that never had partitions is
// partition 0 of its one-partition layout.
const PartitionSep = "#"

// PartitionName returns the name of the queue of partition k of the
// partitioned queue name: name itself for k = 0, "name#k" otherwise. Every
// partition thus has a hash tag of its own.
func PartitionName(name string, k int) string {
	if k == 0 {
		return name
	}
	return name + PartitionSep + strconv.Itoa(k)
}

// PartitionOf returns the partition of key among n: FNV-1a of the key
// modulo n. Every producer of every process routes a key alike.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// PartitionKey returns the key of the layout of the partitioned queue name
// under prefix: a hash under the base name's tag (the slot of partition 0).
func PartitionKey(prefix, name string) string { return NewKeys(prefix, name).Part("partitions") }

// Layout is a partitioned queue's layout as stored in Redis.
type Layout struct {
	// N is the number of partitions producers write to (1 when none is set).
	N int
	// Epoch counts the changes of N (0: never set).
	Epoch int64
	// Drain is, after N was lowered, the number of partitions that may
	// still hold jobs: consumers read partitions 0..max(N, Drain)-1. 0 when
	// no partition is being drained.
	Drain int
	// Switched is when N last changed (Redis time, Unix ms; 0: never).
	Switched int64
}

// Read returns the number of partitions consumers and inspectors read:
// max(N, Drain).
func (l Layout) Read() int { return max(l.N, l.Drain) }

// scriptSetPartitions changes a queue's number of partitions.
//
// KEYS[1] the layout hash
// ARGV[1] the new N, ARGV[2] the epoch the caller read ("" : any)
// Returns {n, epoch, drain, switched} after the change; a call whose N is
// the current one changes nothing (so a re-sent call is harmless). Fails
// with "STALE <epoch>" when ARGV[2] is not the current epoch.
var scriptSetPartitions = redis.NewScript(timeLib + `
local cur = redis.call('HMGET', KEYS[1], 'n', 'epoch', 'drain', 'switched')
local n, epoch, drain, sw = tonumber(cur[1] or '1'), tonumber(cur[2] or '0'), tonumber(cur[3] or '0'), tonumber(cur[4] or '0')
local want = tonumber(ARGV[1])
if want == n then return {n, epoch, drain, sw} end
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= epoch then
  return redis.error_reply('STALE ' .. epoch)
end
if want < n then drain = math.max(drain, n) end
if drain <= want then drain = 0 end
epoch = epoch + 1
sw = now_ms()
redis.call('HSET', KEYS[1], 'n', want, 'epoch', epoch, 'drain', drain, 'switched', sw)
return {want, epoch, drain, sw}
`)

// scriptSetDrain sets the drain count of a layout, if its epoch is still
// the one the caller read.
//
// KEYS[1] the layout hash
// ARGV[1] the epoch the caller read, ARGV[2] the new drain count
// Returns {n, epoch, drain, switched}. Fails with "STALE <epoch>" when the
// epoch changed.
var scriptSetDrain = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'n', 'epoch', 'drain', 'switched')
local n, epoch, drain, sw = tonumber(cur[1] or '1'), tonumber(cur[2] or '0'), tonumber(cur[3] or '0'), tonumber(cur[4] or '0')
if tonumber(ARGV[1]) ~= epoch then return redis.error_reply('STALE ' .. epoch) end
drain = tonumber(ARGV[2])
if drain <= n then drain = 0 end
if epoch > 0 then redis.call('HSET', KEYS[1], 'drain', drain) end
return {n, epoch, drain, sw}
`)

// ErrStaleLayout is returned when a layout changed since the caller read it.
var ErrStaleLayout = errors.New("the partition layout changed since it was read")

// ReadLayout reads the layout at key (N = 1 when none is stored).
func ReadLayout(ctx context.Context, c redis.UniversalClient, key string) (Layout, error) {
	v, err := c.HMGet(ctx, key, "n", "epoch", "drain", "switched").Result()
	if err != nil {
		return Layout{}, err
	}
	x := [4]int64{1, 0, 0, 0}
	for i := range x {
		s, _ := v[i].(string)
		if s == "" {
			continue
		}
		if x[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return Layout{}, fmt.Errorf("layout %s: field %d is %q, not a number", key, i, s)
		}
	}
	l := Layout{N: int(x[0]), Epoch: x[1], Drain: int(x[2]), Switched: x[3]}
	if l.N < 1 || l.N > MaxPartitions {
		return Layout{}, fmt.Errorf("layout %s: n is %d, outside 1..%d", key, l.N, MaxPartitions)
	}
	return l, nil
}

// SetLayout runs scriptSetPartitions; epoch < 0 means any epoch.
func SetLayout(ctx context.Context, c redis.UniversalClient, key string, n int, epoch int64) (Layout, error) {
	e := ""
	if epoch >= 0 {
		e = strconv.FormatInt(epoch, 10)
	}
	return layoutReply(scriptSetPartitions.Run(ctx, c, []string{key}, n, e))
}

// SetDrain runs scriptSetDrain.
func SetDrain(ctx context.Context, c redis.UniversalClient, key string, epoch int64, drain int) (Layout, error) {
	return layoutReply(scriptSetDrain.Run(ctx, c, []string{key}, epoch, drain))
}

// layoutReply parses the reply {n, epoch, drain, switched} of a layout
// script.
func layoutReply(cmd *redis.Cmd) (Layout, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && len(re.Error()) > 6 && re.Error()[:6] == "STALE " {
			return Layout{}, fmt.Errorf("%w (epoch now %s): read it again", ErrStaleLayout, re.Error()[6:])
		}
		return Layout{}, err
	}
	if len(v) != 4 {
		return Layout{}, fmt.Errorf("unexpected layout reply %v", v)
	}
	return Layout{N: int(v[0]), Epoch: v[1], Drain: int(v[2]), Switched: v[3]}, nil
}

// Job IDs of partitioned queues. A job enqueued into partition k with a
// generated ID (a stream entry ID, see Generated) is named "p<k>~<ID>" by
// the partitioned producer, so a look-up goes to its partition at once. No
// ID a plain queue generates or a producer may choose holds a '~' (see
// JobIDProblem), so such an ID meets no other. A chosen ID stays as chosen:
// it routes by its own hash (unless a partition, dedup or flow key routes
// the job), and a look-up asks that partition first.

// partitionIDMark and partitionIDSep frame a partition's number in a
// partition-qualified job ID.
const (
	partitionIDMark = "p"
	partitionIDSep  = "~"
)

// PartitionJobID returns the ID a partitioned queue gives the job id of
// partition k: "p<k>~<id>" for a generated id, id itself for a chosen one
// (and for "").
func PartitionJobID(k int, id string) string {
	if !Generated(id) {
		return id
	}
	return partitionIDMark + strconv.Itoa(k) + partitionIDSep + id
}

// SplitPartitionJobID returns the partition and the ID within it of a
// partition-qualified job ID ("p3~1700000000000-0" -> 3,
// "1700000000000-0"); ok is false for any other id.
func SplitPartitionJobID(id string) (k int, rest string, ok bool) {
	head, rest, found := strings.Cut(id, partitionIDSep)
	num, marked := strings.CutPrefix(head, partitionIDMark)
	if !found || !marked || rest == "" || !Decimal(num) || len(num) > 4 || (len(num) > 1 && num[0] == '0') {
		return 0, "", false
	}
	k, _ = strconv.Atoi(num)
	if k >= MaxPartitions {
		return 0, "", false
	}
	return k, rest, true
}

// PartitionsToAsk returns where to look for the job id of a partitioned
// queue of layout l: the partition and ID within it of a
// partition-qualified id; else id and the partitions that are read, the
// one id's hash routes to first (where a chosen ID routed by itself is).
func PartitionsToAsk(id string, l Layout) (bare string, ks []int) {
	if k, rest, ok := SplitPartitionJobID(id); ok {
		return rest, []int{k}
	}
	first := PartitionOf(id, l.N)
	ks = append(make([]int, 0, l.Read()), first)
	for k := range l.Read() {
		if k != first {
			ks = append(ks, k)
		}
	}
	return id, ks
}
