// Package framing owns the stdio framing of JSON-RPC that MCP sessions and
// the daemon's relay share: one message per line, read within a bound
// without holding a longer one, and the error answer to a message over it.
// It imports no MCP library: the relay, which parses nothing, uses it too.
package framing

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
)

// DefaultMaxMessage bounds one MCP message read from a client's stream
// (a stdio line, a relayed line) when the config sets none: the default
// of an HTTP request body as well.
const DefaultMaxMessage = 8 << 20

// headBytes of a message too long to keep are kept, to answer it by id.
const headBytes = 512

// ReadMessage reads one line of at most max bytes, newline included. A
// longer line is read to its end but not kept: it returns the line's
// first bytes, its whole length and tooLong, so memory stays bounded by
// max whatever a client sends.
func ReadMessage(br *bufio.Reader, max int) (line []byte, size int, tooLong bool, err error) {
	for {
		frag, e := br.ReadSlice('\n')
		size += len(frag)
		switch {
		case tooLong:
		case len(line)+len(frag) > max:
			tooLong = true
			if keep := headBytes - len(line); keep > 0 {
				line = append(line, frag[:min(keep, len(frag))]...)
			}
			line = line[:min(len(line), headBytes)]
		default:
			line = append(line, frag...)
		}
		if e == bufio.ErrBufferFull {
			continue
		}
		return line, size, tooLong, e
	}
}

// idField finds a request's id in the first bytes of its message (clients
// write it before the params that make a message large).
var idField = regexp.MustCompile(`"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.){0,200}")`)

// TooLongReply is the error answer to a message over the bound, or nil
// when its head shows no id (a notification, or an id written after the
// params): that message is dropped, and the caller logs it.
func TooLongReply(head []byte, size, max int) []byte {
	m := idField.FindSubmatch(head)
	if m == nil {
		return nil
	}
	var id any
	dec := json.NewDecoder(bytes.NewReader(m[1]))
	dec.UseNumber() // an id of any size comes back as it was sent
	if err := dec.Decode(&id); err != nil {
		return nil
	}
	msg := fmt.Sprintf("the message is %d bytes, over the limit of %d bytes for one MCP message; send less (a large prompt can go in a file the child reads), or raise max_message_bytes in the config", size, max)
	b, err := json.Marshal(rpcError{JSONRPC: "2.0", ID: id, Error: rpcErrorBody{Code: invalidRequest, Message: msg}})
	if err != nil {
		return nil
	}
	return append(b, '\n')
}

// invalidRequest is JSON-RPC's -32600, Invalid Request.
const invalidRequest = -32600

// rpcError is a JSON-RPC error response.
type rpcError struct {
	JSONRPC string       `json:"jsonrpc"`
	ID      any          `json:"id"`
	Error   rpcErrorBody `json:"error"`
}

type rpcErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}
