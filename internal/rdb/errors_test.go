package rdb

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// replyError is an error reply as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestFatal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{replyError("WRONGTYPE Operation against a key"), true},
		{replyError("NOPERM this user has no permissions"), true},
		{fmt.Errorf("streamq: read: %w", replyError("NOAUTH Authentication required.")), true},
		{replyError("ERR unknown command 'XAUTOCLAIM'"), true},
		{replyError("ERR The user executing the script can't run this command or subcommand script: a53b, on @user_script:1."), true},
		{replyError("ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: f458, on @user_script:1."), true},
		{fmt.Errorf("priority: pop: %w", replyError("ERR The user executing the script can't run this command or subcommand")), true},
		// Valkey 8's words for the same.
		{replyError("ERR ACL failure in script: User nozadd has no permissions to run the 'zadd' command script: a9e9, on @user_script:1."), true},
		{replyError("ERR Error running script (call to f_1): @user_script:1: user_script:1: too many results to unpack"), false},
		{replyError("LOADING Redis is loading"), false},
		{errors.New("WRONGTYPE from something that is not Redis"), false},
		{errors.New("dial tcp: connection refused"), false},
		{nil, false},
	} {
		if got := Fatal(tc.err); got != tc.want {
			t.Errorf("Fatal(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestTranslate(t *testing.T) {
	t.Parallel()
	err := Translate(replyError("QUEUEFULL 5 unacknowledged jobs, cap 5, batch of 1"))
	if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "(5 unacknowledged jobs, cap 5, batch of 1)") {
		t.Errorf("Translate(QUEUEFULL) = %v", err)
	}
	other := replyError("ERR something else")
	if got := Translate(other); got != error(other) {
		t.Errorf("Translate changed %v into %v", other, got)
	}
	if Translate(nil) != nil {
		t.Error("Translate(nil) is not nil")
	}
	if !IsBusyGroup(replyError("BUSYGROUP Consumer Group name already exists")) || !IsNoGroup(replyError("NOGROUP No such key")) {
		t.Error("BUSYGROUP or NOGROUP not recognised")
	}
}
