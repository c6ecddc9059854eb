//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/schemas"
)

// wireShape is the validator of one definition of our transcription of
// the Tasks extension's wire shapes (schemas/tasks-2026-07-28.json): the
// document with its root pointed at #/$defs/def.
func wireShape(t *testing.T, def string) *schemas.Validator {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(schemas.TasksWire, &doc); err != nil {
		t.Fatal(err)
	}
	defs, _ := doc["$defs"].(map[string]any)
	if defs[def] == nil {
		t.Fatalf("schemas/tasks-2026-07-28.json defines no %s", def)
	}
	doc["$ref"] = "#/$defs/" + def
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := schemas.Compile(def, b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkShape fails the test unless raw (a JSON-RPC result or error
// object, as sent) is a def; it returns raw decoded.
func checkShape(t *testing.T, def string, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := wireShape(t, def).Decode(raw, &m); err != nil {
		t.Fatalf("not the spec's %s: %v\n%s", def, err, raw)
	}
	return m
}

// rejectsRenamed proves the check is closed on real data: raw with its
// key from renamed to "x"+from, and with it dropped when required, is
// not a def.
func rejectsRenamed(t *testing.T, def string, raw json.RawMessage, from string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m[from] == nil {
		t.Fatalf("%s has no %q to rename: %s", def, from, raw)
	}
	m["x"+from] = m[from]
	delete(m, from)
	b, _ := json.Marshal(m)
	var dst map[string]any
	if err := wireShape(t, def).Decode(b, &dst); err == nil {
		t.Fatalf("%s admits %q renamed: the check is not strict\n%s", def, from, b)
	}
}

func rawResult(t *testing.T, ctx context.Context, c *rawClient, method string, params map[string]any) json.RawMessage {
	t.Helper()
	raw, rerr := c.do(ctx, method, params)
	if rerr != nil {
		t.Fatalf("%s answered an error: %v (%s)", method, rerr, rerr.raw)
	}
	return raw
}

func rawError(t *testing.T, ctx context.Context, c *rawClient, method string, params map[string]any) json.RawMessage {
	t.Helper()
	raw, rerr := c.do(ctx, method, params)
	if rerr == nil {
		t.Fatalf("%s answered %s, want an error", method, raw)
	}
	return rerr.raw
}

// heldTask starts a subagent task whose child is held at name, checks the
// handle against CreateTaskResult, and returns the task id and the
// handle, decoded and as sent.
func heldTask(t *testing.T, ctx context.Context, c *rawClient, child *childModel, name string) (string, map[string]any, json.RawMessage) {
	t.Helper()
	child.Hold(name)
	raw := rawResult(t, ctx, c, "tools/call", map[string]any{"name": "subagent", "arguments": subagentArgs(child, name)})
	h := checkShape(t, "CreateTaskResult", raw)
	<-child.Arrived(name)
	return h["taskId"].(string), h, raw
}

// settled polls a task until it leaves working and returns its last
// tasks/get answer as sent, checked against GetTaskResult and want.
func settled(t *testing.T, ctx context.Context, c *rawClient, id, want string) map[string]any {
	t.Helper()
	pollTask(t, ctx, c, id, 30*time.Second)
	raw := rawResult(t, ctx, c, "tasks/get", map[string]any{"taskId": id})
	m := checkShape(t, want, raw)
	checkShape(t, "GetTaskResult", raw)
	return m
}

// TestTasksWireSchema drives the layer over stdio (through the daemon)
// and HTTP through every shape it sends — the advertised capability, the
// handle, tasks/get working, completed (a success and an isError result),
// cancelled and failed (after a kill -9), the tasks/update and
// tasks/cancel acknowledgements, and the not-found and undeclared errors
// — and checks each raw answer against our transcription of the spec's
// schema, which is closed: a renamed field fails it.
func TestTasksWireSchema(t *testing.T) {
	transports(t, func(t *testing.T, httpT bool) {
		ctx, child, srv, c := taskSetup(t, httpT)

		var disc struct {
			Capabilities struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"capabilities"`
		}
		if err := json.Unmarshal(rawResult(t, ctx, c, "server/discover", nil), &disc); err != nil {
			t.Fatal(err)
		}
		capRaw := disc.Capabilities.Extensions[tasksExt]
		if capRaw == nil {
			t.Fatalf("server/discover advertises no %s", tasksExt)
		}
		checkShape(t, "TasksExtensionCapability", capRaw)

		plain := srv.client(false, "")
		for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
			_, rerr := plain.do(ctx, m, map[string]any{"taskId": "task-x"})
			if rerr == nil {
				t.Fatalf("undeclared %s answered no error", m)
			}
			checkShape(t, "MissingRequiredClientCapabilityError", rerr.raw)
			if httpT && rerr.status != http.StatusBadRequest {
				t.Fatalf("undeclared %s over HTTP came with status %d, want 400 (base spec: MissingRequiredClientCapabilityError)", m, rerr.status)
			}
		}
		undeclared := rawError(t, ctx, plain, "tasks/get", map[string]any{"taskId": "task-x"})
		rejectsRenamed(t, "MissingRequiredClientCapabilityError", undeclared, "data")
		rejectsRenamed(t, "MissingRequiredClientCapabilityError", undeclared, "message")

		// The handle, and tasks/get while the child is held.
		id, _, handle := heldTask(t, ctx, c, child, "ok")
		for _, k := range []string{"taskId", "statusMessage", "pollIntervalMs", "resultType"} {
			rejectsRenamed(t, "CreateTaskResult", handle, k)
		}
		working := rawResult(t, ctx, c, "tasks/get", map[string]any{"taskId": id})
		if w := checkShape(t, "WorkingTaskResult", working); w["taskId"] != id {
			t.Fatalf("tasks/get %s answered task %v", id, w["taskId"])
		}
		checkShape(t, "GetTaskResult", working)
		rejectsRenamed(t, "WorkingTaskResult", working, "lastUpdatedAt")
		checkShape(t, "UpdateTaskResult", rawResult(t, ctx, c, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{}}))

		// Completed with a success result.
		child.Release("ok")
		done := settled(t, ctx, c, id, "CompletedTaskResult")
		if r := done["result"].(map[string]any); r["isError"] == true {
			t.Fatalf("the task of a completed turn has an error result: %v", r)
		}

		// Completed with an isError result: a child interrupted by
		// interrupt_agent (not tasks/cancel) ends aborted.
		eid, eh, _ := heldTask(t, ctx, c, child, "aborted")
		c.callTool(ctx, "interrupt_agent", map[string]any{"agent_id": agentOf(eh)})
		if r := settled(t, ctx, c, eid, "CompletedTaskResult")["result"].(map[string]any); r["isError"] != true {
			t.Fatalf("the interrupted child's task result is not an error result: %v", r)
		}

		// Cancelled.
		cid, _, _ := heldTask(t, ctx, c, child, "cancel")
		checkShape(t, "CancelTaskResult", rawResult(t, ctx, c, "tasks/cancel", map[string]any{"taskId": cid}))
		settled(t, ctx, c, cid, "CancelledTaskResult")

		// Not found: an unknown id, and a missing one.
		unknown := map[string]any{"taskId": "task-00000000000000000000000000000000"}
		for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
			e := checkShape(t, "InvalidParamsError", rawError(t, ctx, c, m, unknown))
			if !strings.Contains(e["message"].(string), "Task not found") {
				t.Fatalf("%s of an unknown task: %v", m, e)
			}
		}
		checkShape(t, "InvalidParamsError", rawError(t, ctx, c, "tasks/get", map[string]any{}))

		// Failed: the server is killed while the child is held; after the
		// restart the task is failed with an internal error, and the
		// completed one is still read from the store in its shape.
		fid, _, _ := heldTask(t, ctx, c, child, "killed")
		srv.kill9()
		srv.start()
		after := srv.client(true, "")
		failed := rawResult(t, ctx, after, "tasks/get", map[string]any{"taskId": fid})
		f := checkShape(t, "FailedTaskResult", failed)
		checkShape(t, "GetTaskResult", failed)
		errRaw, _ := json.Marshal(f["error"])
		checkShape(t, "InternalError", errRaw)
		rejectsRenamed(t, "FailedTaskResult", failed, "error")
		stored := rawResult(t, ctx, after, "tasks/get", map[string]any{"taskId": id})
		checkShape(t, "CompletedTaskResult", stored)
		rejectsRenamed(t, "CompletedTaskResult", stored, "result")
	})
}
