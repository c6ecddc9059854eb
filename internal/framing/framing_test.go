package framing

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestReadMessageKeepsLinesWithinTheBound(t *testing.T) {
	in := "short\n" + strings.Repeat("a", 99) + "\n" + strings.Repeat("b", 100) + "\n" + "tail"
	br := bufio.NewReaderSize(strings.NewReader(in), 16) // lines span many buffer fills
	type got struct {
		line    string
		size    int
		tooLong bool
	}
	var all []got
	for {
		line, size, tooLong, err := ReadMessage(br, 100)
		all = append(all, got{string(line), size, tooLong})
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
	}
	want := []got{
		{"short\n", 6, false},
		{strings.Repeat("a", 99) + "\n", 100, false}, // exactly the bound
		{strings.Repeat("b", 100) + "\n", 101, true}, // one over: refused (its head is all of it)
		{"tail", 4, false},
	}
	if len(all) != len(want) {
		t.Fatalf("read %d lines, want %d: %+v", len(all), len(want), all)
	}
	for i := range want {
		if all[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, all[i], want[i])
		}
	}
}

// endless yields one huge line without holding it.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), e.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	if e.n == k {
		p[k-1] = '\n'
	}
	e.n -= k
	return k, nil
}

// A 100 MiB line over a 1 MiB bound costs what growing a line to the
// bound costs, not the line.
func TestATooLongLineIsNotHeld(t *testing.T) {
	br := bufio.NewReaderSize(&endless{n: 100 << 20}, 64<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	line, size, tooLong, err := ReadMessage(br, 1<<20)
	runtime.ReadMemStats(&after)
	if err != nil || !tooLong || size != 100<<20 || len(line) != headBytes {
		t.Fatalf("readMessage = %d bytes kept, size %d, tooLong %v, %v", len(line), size, tooLong, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("reading a 100 MiB line over a 1 MiB bound allocated %d bytes", alloc)
	}
}

func TestTooLongReplyAnswersByTheIDInTheHead(t *testing.T) {
	for _, tc := range []struct {
		head, id string // id: as it must come back; "": no reply
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"prompt":"xxxx`, `7`},
		{`{"jsonrpc":"2.0","id":"req-\"9\"","method":"tools/call","params":{`, `"req-\"9\""`},
		{`{"id": 12345678901234567890, "jsonrpc":"2.0"`, `12345678901234567890`},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"xxx`, ``},
		{`{"jsonrpc":"2.0","params":{"prompt":"xxxxxxxxxxxxxxxxxxxxxxxxxxxx`, ``},
	} {
		reply := TooLongReply([]byte(tc.head), 9<<20, 8<<20)
		if tc.id == "" {
			if reply != nil {
				t.Errorf("head %q: reply %s, want none", tc.head, reply)
			}
			continue
		}
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if !bytes.HasSuffix(reply, []byte("\n")) || json.Unmarshal(reply, &m) != nil {
			t.Fatalf("head %q: reply %q is not one JSON-RPC line", tc.head, reply)
		}
		if string(m.ID) != tc.id || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "max_message_bytes") || !strings.Contains(m.Error.Message, "9437184 bytes") {
			t.Errorf("head %q: reply %s", tc.head, reply)
		}
	}
}
