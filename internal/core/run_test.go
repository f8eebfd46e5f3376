package core

import (
	"strings"
	"testing"
)

func TestNameProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, s, forbid, want string
	}{
		{"valid", "emails-1.a_b", "", ""},
		{"empty", "", "", "is empty"},
		{"too long", strings.Repeat("a", MaxNameLen+1), "", "201 bytes long: use at most 200"},
		{"longest", strings.Repeat("a", MaxNameLen), "", ""},
		{"space", "a b", "", `"a b" contains ' ' at byte 1: use letters, digits and punctuation other than '{' and '}', without spaces`},
		{"brace", "a{b}", "", `contains '{' at byte 1`},
		{"forbidden", "a|b", "|", `contains '|' at byte 1: use letters, digits and punctuation other than '{', '}' and '|', without spaces`},
		{"allowed elsewhere", "a|b", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := NameProblem(tc.s, tc.forbid)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("NameProblem(%q, %q) = %q, want %q", tc.s, tc.forbid, got, tc.want)
			}
		})
	}
}

func TestDefaultName(t *testing.T) {
	t.Parallel()
	for _, forbid := range []string{"", "|-"} { // '-' forbidden: the host name cannot be used
		name := defaultName("worker", forbid)
		if forbid == "" && NameProblem(name, forbid) != "" {
			t.Errorf("defaultName = %q: %s", name, NameProblem(name, forbid))
		}
		if forbid != "" && !strings.HasPrefix(name, "worker-") {
			t.Errorf("defaultName with %q forbidden = %q, want the role as its start", forbid, name)
		}
	}
}
