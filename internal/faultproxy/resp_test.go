package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readers returns the ways a test feeds input to a parser: whole, and one
// byte per read through a small buffer, so every value is split across reads.
func readers(in string) map[string]*bufio.Reader {
	return map[string]*bufio.Reader{
		"whole":    bufio.NewReader(strings.NewReader(in)),
		"one byte": bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(in)), 16),
	}
}

func TestReadReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []string // replies, back to back
	}{
		{name: "simple string", in: []string{"+OK\r\n"}},
		{name: "error", in: []string{"-ERR unknown command\r\n"}},
		{name: "integer", in: []string{":1000\r\n", ":-1\r\n"}},
		{name: "bulk", in: []string{"$5\r\nhello\r\n"}},
		{name: "empty bulk", in: []string{"$0\r\n\r\n"}},
		{name: "bulk holding CRLF", in: []string{"$7\r\na\r\n*1\r\n\r\n"}},
		{name: "bulk longer than the reader's buffer", in: []string{"$100\r\n" + strings.Repeat("x", 100) + "\r\n"}},
		{name: "null bulk", in: []string{"$-1\r\n", "+after\r\n"}},
		{name: "null array", in: []string{"*-1\r\n"}},
		{name: "empty array", in: []string{"*0\r\n"}},
		{name: "array", in: []string{"*3\r\n:1\r\n$1\r\na\r\n+b\r\n"}},
		{name: "nested arrays", in: []string{"*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*-1\r\n"}},
		{name: "XREADGROUP reply", in: []string{"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\np\r\n$2\r\nhi\r\n"}},
		{name: "RESP3 null", in: []string{"_\r\n"}},
		{name: "RESP3 double", in: []string{",3.14\r\n", ",inf\r\n"}},
		{name: "RESP3 boolean", in: []string{"#t\r\n", "#f\r\n"}},
		{name: "RESP3 big number", in: []string{"(3492890328409238509324850943850943825024385\r\n"}},
		{name: "RESP3 blob error", in: []string{"!21\r\nSYNTAX invalid syntax\r\n"}},
		{name: "RESP3 verbatim", in: []string{"=15\r\ntxt:Some string\r\n"}},
		{name: "RESP3 map", in: []string{"%2\r\n+first\r\n:1\r\n+second\r\n*2\r\n:2\r\n_\r\n"}},
		{name: "RESP3 set", in: []string{"~3\r\n+a\r\n+b\r\n,1.5\r\n"}},
		{name: "RESP3 push", in: []string{">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"}},
		{name: "HELLO 3 reply", in: []string{"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nmodules\r\n*0\r\n"}},
		{name: "attribute before a value", in: []string{"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*2\r\n:2\r\n:3\r\n", ":7\r\n"}},
		{name: "attribute inside an array", in: []string{"*2\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n"}},
		{name: "map of sets of maps", in: []string{"%1\r\n+k\r\n~1\r\n%1\r\n+a\r\n#t\r\n"}},
	}
	for _, tt := range tests {
		for how, r := range readers(strings.Join(tt.in, "")) {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				for i, want := range tt.in {
					got, err := readReply(r, []byte("prefix"))
					if err != nil {
						t.Fatalf("reply %d: %v", i, err)
					}
					if string(got) != "prefix"+want {
						t.Fatalf("reply %d = %q, want %q", i, got, "prefix"+want)
					}
				}
				if _, err := readReply(r, nil); err != io.EOF {
					t.Errorf("after the last reply: err = %v, want io.EOF", err)
				}
			})
		}
	}
}

func TestReadReply_Errors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantProto bool // an errProtocol rather than an I/O error
	}{
		{name: "unknown type", in: "hello\r\n", wantProto: true},
		{name: "binary, no line end", in: "N", wantProto: true},
		{name: "bare LF", in: "+OK\n", wantProto: true},
		{name: "empty line", in: "\r\n", wantProto: true},
		{name: "bad length", in: "$x\r\n", wantProto: true},
		{name: "length below -1", in: "*-2\r\n", wantProto: true},
		{name: "bulk without CRLF", in: "$2\r\nabcd", wantProto: true},
		{name: "streamed string", in: "$?\r\n;4\r\nHell\r\n;0\r\n", wantProto: true},
		{name: "too deep", in: strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n", wantProto: true},
		{name: "line too long", in: "+" + strings.Repeat("x", maxLine+1), wantProto: true},
		{name: "truncated bulk", in: "$5\r\nhel"},
		{name: "truncated array", in: "*2\r\n:1\r\n"},
		{name: "truncated line", in: "+O"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readReply(bufio.NewReader(strings.NewReader(tt.in)), nil)
			if err == nil {
				t.Fatalf("readReply(%q) = %q, want an error", tt.in, got)
			}
			if errors.Is(err, errProtocol) != tt.wantProto {
				t.Errorf("readReply(%q) err = %v; protocol error: %v, want %v", tt.in, err, !tt.wantProto, tt.wantProto)
			}
			// What was consumed is returned, so the proxy can forward it.
			if !strings.HasPrefix(tt.in, string(got)) {
				t.Errorf("readReply(%q) returned %q, want the consumed prefix", tt.in, got)
			}
		})
	}
}

func TestReadCommand(t *testing.T) {
	t.Parallel()
	type cmd struct {
		raw  string
		args []string
	}
	tests := []struct {
		name string
		in   []cmd
	}{
		{name: "array", in: []cmd{{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", []string{"GET", "k"}}}},
		{name: "binary argument", in: []cmd{{"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\n", []string{"ECHO", "a\r\nb"}}}},
		{name: "empty argument", in: []cmd{{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", []string{"SET", "k", ""}}}},
		{name: "pipeline", in: []cmd{
			{"*1\r\n$4\r\nPING\r\n", []string{"PING"}},
			{"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", []string{"INCR", "n"}},
			{"*3\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n", []string{"XREADGROUP", "GROUP", "g"}},
		}},
		{name: "inline", in: []cmd{{"PING\r\n", []string{"PING"}}, {"set  k v\n", []string{"set", "k", "v"}}}},
		{name: "no arguments", in: []cmd{{"\r\n", nil}, {"*0\r\n", nil}, {"*-1\r\n", nil}, {"*1\r\n$4\r\nPING\r\n", []string{"PING"}}}},
		{name: "long argument", in: []cmd{{"*1\r\n$40\r\n" + strings.Repeat("a", 40) + "\r\n", []string{strings.Repeat("a", 40)}}}},
	}
	for _, tt := range tests {
		var in strings.Builder
		for _, c := range tt.in {
			in.WriteString(c.raw)
		}
		for how, r := range readers(in.String()) {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				var buf []byte
				for i, want := range tt.in {
					var (
						args [][]byte
						err  error
					)
					start := len(buf)
					buf, args, err = readCommand(r, buf)
					if err != nil {
						t.Fatalf("command %d: %v", i, err)
					}
					if got := string(buf[start:]); got != want.raw {
						t.Errorf("command %d bytes = %q, want %q", i, got, want.raw)
					}
					if len(args) != len(want.args) {
						t.Fatalf("command %d args = %q, want %q", i, args, want.args)
					}
					for j := range args {
						if string(args[j]) != want.args[j] {
							t.Errorf("command %d arg %d = %q, want %q", i, j, args[j], want.args[j])
						}
					}
				}
				if _, _, err := readCommand(r, nil); err != io.EOF {
					t.Errorf("after the last command: err = %v, want io.EOF", err)
				}
			})
		}
	}
}

func TestReadCommand_Errors(t *testing.T) {
	t.Parallel()
	// Binary bytes are refused before anything is consumed, so that the
	// proxy forwards them at once rather than wait for a line end.
	postgresSSLRequest := "\x00\x00\x00\x08\x04\xd2\x16\x2f"
	r := bufio.NewReader(strings.NewReader(postgresSSLRequest))
	if got, _, err := readCommand(r, nil); !errors.Is(err, errProtocol) || len(got) != 0 || r.Buffered() != len(postgresSSLRequest) {
		t.Errorf("readCommand(Postgres SSLRequest) = %q, %v; want errProtocol with nothing consumed", got, err)
	}
	for _, in := range []string{
		"*1\r\n:1\r\n",                 // an argument that is not a bulk string
		"*1\r\n$x\r\n",                 // bad bulk length
		"*x\r\n",                       // bad count
		"*1\r\n$1\r\nab\r\n",           // bulk not followed by CRLF
		strings.Repeat("a", maxLine+1), // endless inline command
	} {
		if _, _, err := readCommand(bufio.NewReader(strings.NewReader(in)), nil); !errors.Is(err, errProtocol) {
			t.Errorf("readCommand(%.20q) err = %v, want errProtocol", in, err)
		}
	}
}
