package streamq

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnqueueOptions(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(time.Hour)
	var o EnqueueOptions
	err := buildOptions(&o, []EnqueueOption{
		WithHeaders(map[string]string{"a": "1", "b": "1"}),
		WithHeader("b", "2"),
		ProcessAt(at),
		Unique("k", time.Minute),
		WithKind("email.send"),
		MaxAttempts(3),
		Timeout(1500 * time.Microsecond),
		Deadline(at.Add(time.Hour)),
		ResultRetention(time.Minute),
		Tags("a", "b"),
		Tags("c"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Headers["a"] != "1" || o.Headers["b"] != "2" {
		t.Errorf("headers = %v, later options must win", o.Headers)
	}
	if !o.At.Equal(at) || o.UniqueKey != "k" || o.UniqueTTL != time.Minute {
		t.Errorf("options = %+v", o)
	}
	if o.Kind != "email.send" || o.MaxAttempts != 3 || o.Timeout != 1500*time.Microsecond ||
		!o.Deadline.Equal(at.Add(time.Hour)) || o.ResultRetention != time.Minute || !slices.Equal(o.Tags, []string{"a", "b", "c"}) {
		t.Errorf("options = %+v", o)
	}
	if m := millis(o.Timeout); m != 2 {
		t.Errorf("timeout of 1.5ms stored as %dms, want 2 (rounded up)", m)
	}

	for _, tc := range []struct {
		name string
		opt  EnqueueOption
		want string
	}{
		{"negative delay", ProcessIn(-time.Second), "ProcessIn"},
		{"empty unique key", Unique("", time.Second), "Unique key"},
		{"long unique key", Unique(strings.Repeat("k", MaxUniqueKeyLen+1), time.Second), "Unique key"},
		{"zero ttl", Unique("k", 0), "Unique ttl"},
		{"empty kind", WithKind(""), "WithKind"},
		{"long kind", WithKind(strings.Repeat("k", MaxKindLen+1)), "WithKind"},
		{"kind with space", WithKind("send email"), "WithKind"},
		{"kind not UTF-8", WithKind("\xff"), "WithKind"},
		{"zero attempts", MaxAttempts(0), "MaxAttempts"},
		{"too many attempts", MaxAttempts(1_000_000_001), "MaxAttempts"},
		{"sub-millisecond timeout", Timeout(time.Microsecond), "Timeout"},
		{"negative timeout", Timeout(-time.Second), "Timeout"},
		{"zero deadline", Deadline(time.Time{}), "Deadline"},
		{"zero retention", ResultRetention(0), "ResultRetention"},
		{"empty tag", Tags("a", ""), "Tags"},
		{"tag with comma", Tags("a,b"), "Tags"},
		{"tag twice", Tags("a", "a"), "Tags"},
		{"too many tags", Tags(slices.Repeat([]string{"t"}, MaxTags+1)...), "Tags"},
	} {
		var o EnqueueOptions
		err := buildOptions(&o, []EnqueueOption{tc.opt})
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.want {
			t.Errorf("%s: err = %v, want ConfigError for %s", tc.name, err, tc.want)
		}
	}
	var o2 EnqueueOptions
	if err := buildOptions(&o2, []EnqueueOption{Tags("a"), Tags("a")}); err == nil {
		t.Error("a tag given twice in two options was accepted")
	}
	if err := buildOptions(&o2, []EnqueueOption{nil}); err == nil {
		t.Error("a nil option was accepted")
	}
}
