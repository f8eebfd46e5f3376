package visible

import "testing"

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in        string
		multiline bool
		want      string
	}{
		{"plain text, é, 日本", false, "plain text, é, 日本"},
		{"invoice\u202Egpj.exe", false, `invoice\u202egpj.exe`},
		{"a\u2066b\u2069c\u200Bd\uFEFFe\u00ADf", false, `a\u2066b\u2069c\u200bd\ufeffe\u00adf`},
		{"line\nnext\tcol", true, "line\nnext\tcol"},
		{"line\nnext\tcol", false, `line\nnext\tcol`},
		{"nul\x00 esc\x1b del\x7f c1\u0085", true, `nul\x00 esc\x1b del\x7f c1\u0085`},
		{"bad \xff byte", false, `bad \xff byte`},
		{"sep\u2028par\u2029", false, `sep\u2028par\u2029`},
		{"filler\u3164", false, `filler\u3164`},
		{"emoji 👍", false, "emoji 👍"},
	} {
		if got := Escape(tt.in, tt.multiline); got != tt.want {
			t.Errorf("Escape(%q, %v) = %q, want %q", tt.in, tt.multiline, got, tt.want)
		}
	}
}
