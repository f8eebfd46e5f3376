package redistest

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Tags is a go-redis hook that records the Redis Cluster hash tags
// ("{orders#3}") named in the arguments (scripts' texts aside) of every command a client sends,
// on its own or in a pipeline, while it is on. Add it with client.AddHook;
// it is safe for concurrent use.
type Tags struct {
	mu   sync.Mutex
	on   bool
	cmds int
	seen map[string]int
}

// Start clears what was recorded and starts recording.
func (h *Tags) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on, h.cmds, h.seen = true, 0, map[string]int{}
}

// Stop stops recording and returns the tags seen, sorted, and the number
// of commands sent since Start.
func (h *Tags) Stop() (tags []string, cmds int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on = false
	for tag := range h.seen {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	return tags, h.cmds
}

func (h *Tags) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.on {
		return
	}
	for _, cmd := range cmds {
		h.cmds++
		for _, a := range cmd.Args() {
			s, _ := a.(string)
			if strings.ContainsAny(s, " \t\n") {
				continue // a script's text, not a key
			}
			for {
				_, rest, ok := strings.Cut(s, "{")
				tag, after, closed := strings.Cut(rest, "}")
				if !ok || !closed {
					break
				}
				h.seen["{"+tag+"}"]++
				s = after
			}
		}
	}
}

// DialHook implements redis.Hook.
func (h *Tags) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *Tags) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *Tags) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}
