package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// mcp-go answers every error of a resource handler with -32603 (internal
// error), so an unknown child, one the caller may not read and a
// malformed URI all read as the server's fault. The transports give a
// resources/read error its code by the word its message starts with
// (edge.ResourceErrorCode): -32002 resource not found, -32602 invalid
// params.

// isResourceRead reports whether raw is a resources/read request; the
// cheap test first, so other messages (a prompt of megabytes) are not
// decoded again.
func isResourceRead(raw []byte) bool {
	if !bytes.Contains(raw, []byte(mcp.MethodResourcesRead)) {
		return false
	}
	var r struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	return json.Unmarshal(raw, &r) == nil && r.Method == string(mcp.MethodResourcesRead) && len(r.ID) > 0
}

// withResourceCodes is resp with a resources/read error's code set by its
// message's word, and the message bounded: mcp-go's own "handler not found
// for resource URI '...'" quotes the URI whole.
func withResourceCodes(resp mcp.JSONRPCMessage) mcp.JSONRPCMessage {
	var e mcp.JSONRPCError
	switch v := resp.(type) {
	case mcp.JSONRPCError:
		e = v
	case *mcp.JSONRPCError:
		e = *v
	default:
		return resp
	}
	if code, ok := edge.ResourceErrorCode(e.Error.Message); ok && e.Error.Code == mcp.INTERNAL_ERROR {
		e.Error.Code = code
	}
	e.Error.Message = truncate.Bound(e.Error.Message, maxRPCErrorBytes)
	return e
}

// maxRPCErrorBytes bounds a resources/read error's message.
const maxRPCErrorBytes = 1024

// resourceCodes is the stdio sessions' Intercept: inner (the tasks layer;
// nil: none), with resources/read errors given their codes.
func resourceCodes(inner edge.Intercept) edge.Intercept {
	return func(ctx context.Context, raw json.RawMessage, next func(context.Context, json.RawMessage) mcp.JSONRPCMessage) mcp.JSONRPCMessage {
		if isResourceRead(raw) {
			return withResourceCodes(next(ctx, raw))
		}
		if inner != nil {
			return inner(ctx, raw, next)
		}
		return next(ctx, raw)
	}
}

// resourceCodesHTTP answers a POST of resources/read itself, through
// handle (the MCP server's HandleMessage, as the tasks layer calls it),
// with the error's code set; any other request reaches next as it came.
// The body was read whole by limitBody before.
func resourceCodesHTTP(next http.Handler, handle func(context.Context, json.RawMessage) mcp.JSONRPCMessage) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "Bad Request: reading the request body failed", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !isResourceRead(body) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(withResourceCodes(handle(r.Context(), body)))
	})
}
