package pgtest

import "testing"

func TestDSN(t *testing.T) {
	t.Setenv("POSTGRES_DSN", "")
	if got := DSN(); got != DefaultDSN {
		t.Errorf("DSN() = %q without POSTGRES_DSN, want %q", got, DefaultDSN)
	}
	t.Setenv("POSTGRES_DSN", "postgres://u@db:5433/x")
	if got := DSN(); got != "postgres://u@db:5433/x" {
		t.Errorf("DSN() = %q, want POSTGRES_DSN", got)
	}
}

func TestRedact(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u:secret@db/x":       "postgres://u:xxxxx@db/x",
		"postgres://u@db/x":              "postgres://u@db/x",
		"host=db user=u password=secret": "(key=value DSN not shown)",
	} {
		if got := Redact(dsn); got != want {
			t.Errorf("Redact(%q) = %q, want %q", dsn, got, want)
		}
	}
}
