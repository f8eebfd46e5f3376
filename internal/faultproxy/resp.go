package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Limits that make the parsers give up (and the proxy fall back to copying
// bytes) rather than buffer without bound on input that is not RESP.
const (
	// maxLine bounds a line: an inline command, or a RESP type line.
	maxLine = 64 << 10
	// maxElements bounds the elements of one aggregate (Redis's own limit
	// for a request is 1M arguments).
	maxElements = 1 << 20
	// maxBulk bounds one bulk string (Redis's proto-max-bulk-len default).
	maxBulk = 512 << 20
	// maxDepth bounds the nesting of aggregates in a reply.
	maxDepth = 64
)

// errProtocol marks input that is not the RESP the parsers understand.
var errProtocol = errors.New("faultproxy: not RESP")

// protoErrorf returns an error that wraps errProtocol.
func protoErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errProtocol}, args...)...)
}

// readCommand reads one client command from r, as Redis parses it: an array
// of bulk strings (*2\r\n$3\r\nGET\r\n$1\r\nk\r\n) or an inline command (a
// line of words). It appends the command's bytes to buf and returns buf and
// the arguments, which point into the returned buf. A command without
// arguments (an empty line, *0) gets no reply from Redis. Inline commands
// are split on blanks, without Redis's quoting rules: good enough to count
// them and match their name. On error, buf holds what was consumed.
func readCommand(r *bufio.Reader, buf []byte) ([]byte, [][]byte, error) {
	// Look before consuming: the bytes of another protocol (Postgres starts
	// with a binary length) must not be held back waiting for a line end.
	b, err := r.Peek(1)
	if err != nil {
		return buf, nil, err
	}
	if b[0] != '*' && !isText(b[0]) {
		return buf, nil, protoErrorf("a command starts with byte %#x", b[0])
	}
	buf, line, err := readLine(r, buf)
	if err != nil {
		return buf, nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		return buf, bytes.Fields(line), nil
	}
	n, err := parseLength(bytes.TrimSuffix(line[1:], []byte("\r")), maxElements)
	if err != nil || n <= 0 { // Redis ignores *0 and *-1
		return buf, nil, err
	}
	spans := make([][2]int, n)
	for i := range spans {
		var head []byte
		if buf, head, err = readLine(r, buf); err != nil {
			return buf, nil, err
		}
		if len(head) == 0 || head[0] != '$' {
			return buf, nil, protoErrorf("argument %d of a command starts with %q, want a bulk string", i, head)
		}
		size, err := parseLength(bytes.TrimSuffix(head[1:], []byte("\r")), maxBulk)
		if err != nil || size < 0 {
			return buf, nil, protoErrorf("argument %d: bad bulk length %q", i, head)
		}
		from := len(buf)
		if buf, err = readBulk(r, buf, size); err != nil {
			return buf, nil, err
		}
		spans[i] = [2]int{from, from + size}
	}
	args := make([][]byte, n)
	for i, s := range spans {
		args[i] = buf[s[0]:s[1]:s[1]]
	}
	return buf, args, nil
}

// readReply reads one complete reply from r and appends its bytes to buf. It
// understands RESP2 and RESP3: simple types (+ - : _ , # ( lines), bulk
// types ($ ! =), aggregates (* ~ > with n elements, % with n pairs, nested
// to any depth) and attributes (| pairs, read together with the value they
// annotate, as one reply). Null bulk strings and arrays ($-1, *-1) are one
// line. RESP3 streamed aggregates ($? *?), which Redis does not send, are an
// error. On error, buf holds what was consumed.
func readReply(r *bufio.Reader, buf []byte) ([]byte, error) {
	return readValue(r, buf, 0)
}

// readValue reads one value at nesting depth.
func readValue(r *bufio.Reader, buf []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return buf, protoErrorf("replies nested deeper than %d", maxDepth)
	}
	b, err := r.Peek(1)
	if err != nil {
		return buf, err
	}
	if !bytes.ContainsRune([]byte("+-:_,#($!=*~>%|"), rune(b[0])) {
		return buf, protoErrorf("unknown reply type %q", b[0])
	}
	buf, line, err := readLine(r, buf)
	if err != nil {
		return buf, err
	}
	if len(line) < 2 || line[len(line)-1] != '\r' {
		return buf, protoErrorf("reply line %q is empty or does not end in CRLF", line)
	}
	typ, body := line[0], line[1:len(line)-1]
	switch typ {
	case '+', '-', ':', '_', ',', '#', '(':
		return buf, nil
	case '$', '!', '=':
		n, err := parseLength(body, maxBulk)
		if err != nil || n < 0 { // $-1: the RESP2 null bulk string
			return buf, err
		}
		return readBulk(r, buf, n)
	case '*', '~', '>', '%', '|':
		n, err := parseLength(body, maxElements)
		if err != nil || n < 0 { // *-1: the RESP2 null array
			return buf, err
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range n {
			if buf, err = readValue(r, buf, depth+1); err != nil {
				return buf, err
			}
		}
		if typ == '|' { // an attribute precedes the value it describes
			return readValue(r, buf, depth)
		}
		return buf, nil
	default: // unreachable: the type was checked before reading the line
		return buf, protoErrorf("unknown reply type %q", typ)
	}
}

// isText reports whether b may start an inline command: printable ASCII or
// white space.
func isText(b byte) bool {
	return b >= 0x20 && b < 0x7f || b == '\t' || b == '\r' || b == '\n'
}

// readLine appends one line (through its \n) to buf and returns buf and the
// line without the \n. The \r before it is left for the caller: Redis
// accepts a bare \n after an inline command, a reply line must end in \r\n.
func readLine(r *bufio.Reader, buf []byte) ([]byte, []byte, error) {
	start := len(buf)
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf)-start > maxLine {
			return buf, nil, protoErrorf("line longer than %d bytes", maxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return buf, nil, err
		}
		return buf, buf[start : len(buf)-1], nil
	}
}

// readBulk appends n bytes and the \r\n that must follow them to buf.
func readBulk(r *bufio.Reader, buf []byte, n int) ([]byte, error) {
	from := len(buf)
	buf = append(buf, make([]byte, n+2)...)
	if k, err := io.ReadFull(r, buf[from:]); err != nil {
		return buf[:from+k], err
	}
	if buf[len(buf)-2] != '\r' || buf[len(buf)-1] != '\n' {
		return buf, protoErrorf("bulk string of %d bytes not followed by CRLF", n)
	}
	return buf, nil
}

// parseLength parses the length of a bulk string or aggregate: -1 (null) to
// limit.
func parseLength(b []byte, limit int) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > limit {
		return 0, protoErrorf("bad length %q", b)
	}
	return n, nil
}
