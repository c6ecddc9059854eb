package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/schemas"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// CaptureToolName is the tool an agent with an output schema delivers its
// structured result through.
const CaptureToolName = "structured_output"

// DefaultMaxSteps bounds the model calls of one turn.
const DefaultMaxSteps = 50

// Config configures an Agent. The zero value of each optional field means
// the default its comment gives.
type Config struct {
	Client llm.Client // required
	Model  string     // passed through to the client; empty: the client's default
	System string     // the system prompt; empty: none
	Tools  []Tool     // what the model may call; names must be unique
	// MaxSteps bounds the model calls of one turn; zero: DefaultMaxSteps.
	MaxSteps int
	// MaxTokens bounds one model answer; zero: the server's default.
	MaxTokens int64
	// Effort is the reasoning effort asked of every model call; empty: the
	// backend's default.
	Effort llm.Effort
	// OutputSchema, when set, is an object-rooted JSON Schema. The agent gets
	// the structured_output tool whose input schema it is, and a turn that
	// never captures a valid object ends with StopError.
	OutputSchema json.RawMessage
	// Journal holds the conversation so far; nil: a new empty journal.
	Journal *Journal
	// Budget, when set, is asked before each model call (call true) and
	// each tool round (call false); an error ends the turn with
	// StopBudget, its text the diagnostic, and nothing more is requested
	// or run. Nil: no budget.
	Budget func(call bool) error
}

// Agent is an in-process agent: a journal and a turn loop over a chat model.
// One turn runs at a time.
type Agent struct {
	cfg     Config
	journal *Journal
	tools   map[string]Tool
	defs    []llm.ToolDef
	schema  *schemas.Output
	turnMu  sync.Mutex
}

// New builds an agent. It fails on duplicate tool names or an output schema
// that is not an object-rooted JSON Schema.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("agent: Config.Client is required")
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	a := &Agent{cfg: cfg, journal: cfg.Journal, tools: map[string]Tool{}}
	if a.journal == nil {
		a.journal = &Journal{}
	}
	add := func(t Tool) error {
		d := t.Def()
		if _, dup := a.tools[d.Name]; dup {
			return fmt.Errorf("agent: duplicate tool %q", d.Name)
		}
		a.tools[d.Name] = t
		a.defs = append(a.defs, d)
		return nil
	}
	for _, t := range cfg.Tools {
		if err := add(t); err != nil {
			return nil, err
		}
	}
	if len(cfg.OutputSchema) > 0 {
		rs, err := ResolveObjectSchema(cfg.OutputSchema)
		if err != nil {
			return nil, fmt.Errorf("agent: output_schema: %w", err)
		}
		a.schema = rs
		if err := add(captureTool{schema: cfg.OutputSchema}); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// ResolveObjectSchema checks and compiles an output schema: an
// object-rooted JSON Schema that resolves, is well-formed and cannot loop
// (see schemas.CompileOutput). Requests, stored children rebuilt after a
// restart and every provider that validates output all go through it, so
// no schema reaches the validator unchecked.
func ResolveObjectSchema(raw json.RawMessage) (*schemas.Output, error) {
	return schemas.CompileOutput(raw)
}

// Journal returns the agent's journal.
func (a *Agent) Journal() *Journal { return a.journal }

// ToolDefs returns what the model is shown.
func (a *Agent) ToolDefs() []llm.ToolDef { return append([]llm.ToolDef(nil), a.defs...) }

// RunTurn runs one turn: it records input as a user message, then calls the
// model and runs the tools it asks for until it answers. Cancelling ctx ends
// the turn with StopAborted. The journal stays balanced whatever happens.
func (a *Agent) RunTurn(ctx context.Context, input string, source string) TurnResult {
	return a.RunTurnWith(ctx, []Input{{Text: input, Source: source}})
}

// RunTurnWith runs one turn whose user side is several messages, each
// recorded with its own source kind (a quiet report riding along with a
// follow-up stays a report).
func (a *Agent) RunTurnWith(ctx context.Context, inputs []Input) TurnResult {
	a.turnMu.Lock()
	defer a.turnMu.Unlock()
	turn := a.journal.NextTurn()
	a.journal.Append(Event{Kind: EventTurnStart, Turn: turn})
	for _, in := range inputs {
		source := in.Source
		if source == "" {
			source = SourceUser
		}
		a.journal.Append(Event{Kind: EventMessage, Turn: turn, Source: source,
			Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	res := a.loop(ctx, turn)
	a.journal.Append(Event{Kind: EventTurnEnd, Turn: turn, StopReason: res.StopReason, Diagnostic: res.Diagnostic})
	return res
}

// nudge is sent when a model with an output schema answers without
// delivering a valid object.
const nudge = "You must deliver your result by calling the structured_output tool with an object that matches its schema before you finish."

// maxNudges bounds how often a model that forgets the capture tool is asked
// again before the turn fails.
const maxNudges = 1

func (a *Agent) loop(ctx context.Context, turn int) TurnResult {
	var res TurnResult
	var captured json.RawMessage
	nudges := 0
	fail := func(reason StopReason, diag string) TurnResult {
		res.StopReason, res.Diagnostic = reason, diag
		return res
	}
	for step := 0; step < a.cfg.MaxSteps; step++ {
		if ctx.Err() != nil {
			return fail(StopAborted, "the run was cancelled")
		}
		if err := a.spend(true); err != nil {
			return fail(StopBudget, err.Error())
		}
		msgs := Messages(a.journal.Events())
		if a.cfg.System != "" {
			msgs = append([]llm.Message{{Role: llm.RoleSystem, Content: a.cfg.System}}, msgs...)
		}
		resp, err := a.cfg.Client.Complete(ctx, llm.Request{
			Model: a.cfg.Model, Messages: msgs, Tools: a.defs, MaxTokens: a.cfg.MaxTokens, Effort: a.cfg.Effort,
		}, nil)
		if err != nil {
			if ctx.Err() != nil {
				return fail(StopAborted, "the run was cancelled")
			}
			return fail(StopError, "model call failed: "+err.Error())
		}
		u := seam.Usage(resp.Usage)
		res.Usage = res.Usage.Add(u)
		msg := resp.Message
		msg.Role = llm.RoleAssistant
		msg.ToolCalls = uniqueCallIDs(msg.ToolCalls, step)
		a.journal.Append(Event{Kind: EventMessage, Turn: turn, Message: record(msg), Usage: &u})
		if strings.TrimSpace(msg.Content) != "" {
			res.Output = msg.Content
		}
		switch resp.FinishReason {
		case llm.FinishLength:
			a.answerUnrun(turn, msg.ToolCalls, "not run: the model's answer was cut off")
			if resp.OutputLimit > 0 {
				return fail(StopMaxTokens, fmt.Sprintf("the model's output passed %d bytes, the bound on one answer (llm.max_output_bytes); the rest was not read", resp.OutputLimit))
			}
			return fail(StopMaxTokens, "the model hit its output token limit")
		case llm.FinishRefusal, llm.FinishContentFilter:
			a.answerUnrun(turn, msg.ToolCalls, "not run: the model declined")
			d := "the model declined the task"
			if msg.Refusal != "" {
				d += ": " + msg.Refusal
				if res.Output == "" {
					res.Output = msg.Refusal
				}
			} else if resp.FinishReason == llm.FinishContentFilter {
				d += " (content filter)"
			}
			return fail(StopRefusal, d)
		}
		if len(msg.ToolCalls) > 0 {
			if err := a.spend(false); err != nil {
				a.answerUnrun(turn, msg.ToolCalls, "not run: the budget is exhausted")
				return fail(StopBudget, err.Error())
			}
			if obj := a.runTools(ctx, turn, msg.ToolCalls); obj != nil {
				captured = obj
			}
			continue
		}
		if a.schema != nil && captured == nil {
			if nudges < maxNudges {
				nudges++
				a.journal.Append(Event{Kind: EventMessage, Turn: turn, Source: SourceUser,
					Message: &seam.Message{Role: seam.RoleUser, Content: nudge}})
				continue
			}
			return fail(StopError, "the child never delivered a structured_output object that matches the output schema")
		}
		res.Structured = captured
		if res.Output == "" && captured != nil {
			res.Output = string(captured)
		}
		res.StopReason = StopCompleted
		return res
	}
	return fail(StopError, fmt.Sprintf("the turn reached its limit of %d model calls", a.cfg.MaxSteps))
}

// spend asks the budget, if any, whether the next model call (call true)
// or tool round may go ahead.
func (a *Agent) spend(call bool) error {
	if a.cfg.Budget == nil {
		return nil
	}
	return a.cfg.Budget(call)
}

// uniqueCallIDs returns calls with every id non-empty and unique within the
// answer. The llm.Client contract does not promise that, and some servers
// repeat or omit ids; two calls sharing an id would leave a journal whose
// answers Validate cannot pair with their calls (so it could neither seed a
// fork nor be resumed). Ids that are already fine are kept.
func uniqueCallIDs(calls []llm.ToolCall, step int) []llm.ToolCall {
	// taken holds the ids kept as they are: the first use of each.
	taken := make(map[string]bool, len(calls))
	keep := make([]bool, len(calls))
	renamed := false
	for i, c := range calls {
		if c.ID != "" && !taken[c.ID] {
			taken[c.ID], keep[i] = true, true
		} else {
			renamed = true
		}
	}
	if !renamed {
		return calls
	}
	out := append([]llm.ToolCall(nil), calls...)
	for i := range out {
		if keep[i] {
			continue
		}
		base := out[i].ID
		if base == "" {
			base = "call"
		}
		id := fmt.Sprintf("%s_%d_%d", base, step, i)
		for taken[id] {
			id += "_"
		}
		out[i].ID, taken[id] = id, true
	}
	return out
}

// answerUnrun records a result for tool calls that will not run, so the
// journal stays balanced and replayable.
func (a *Agent) answerUnrun(turn int, calls []llm.ToolCall, why string) {
	for _, c := range calls {
		a.journal.Append(Event{Kind: EventMessage, Turn: turn,
			Message: &seam.Message{Role: seam.RoleTool, ToolCallID: c.ID, Content: why}})
	}
}

// runTools runs calls concurrently and records their results in call order.
// It returns the object of a valid structured_output call, if any.
func (a *Agent) runTools(ctx context.Context, turn int, calls []llm.ToolCall) json.RawMessage {
	out := make([]string, len(calls))
	var captured json.RawMessage
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Name == CaptureToolName && a.schema != nil {
				obj, text := a.capture(c.Arguments)
				out[i] = text
				if obj != nil {
					mu.Lock()
					captured = obj
					mu.Unlock()
				}
				return
			}
			out[i] = a.callTool(ctx, c)
		}()
	}
	wg.Wait()
	for i, c := range calls {
		a.journal.Append(Event{Kind: EventMessage, Turn: turn,
			Message: &seam.Message{Role: seam.RoleTool, ToolCallID: c.ID, Content: out[i]}})
	}
	return captured
}

func (a *Agent) callTool(ctx context.Context, c llm.ToolCall) (text string) {
	t, ok := a.tools[c.Name]
	if !ok {
		return fmt.Sprintf("Error: tool %q is not available to you", c.Name)
	}
	if ctx.Err() != nil {
		return "Error: not run: the turn was cancelled"
	}
	defer func() {
		if r := recover(); r != nil {
			text = fmt.Sprintf("Error: tool %q failed: %v", c.Name, r)
		}
	}()
	args := json.RawMessage(c.Arguments)
	if len(strings.TrimSpace(c.Arguments)) == 0 {
		args = json.RawMessage("{}")
	}
	s, err := t.Call(ctx, args)
	if err != nil {
		return "Error: " + err.Error()
	}
	return s
}

func (a *Agent) capture(arguments string) (json.RawMessage, string) {
	var v any
	if err := json.Unmarshal([]byte(arguments), &v); err != nil {
		return nil, "Error: the arguments are not valid JSON: " + err.Error() + ". Call structured_output again with a JSON object."
	}
	// The bounded validator: a value too deep or too costly to check is
	// refused like a mismatch, never allowed to exhaust the stack.
	if err := a.schema.Validate(v); err != nil {
		return nil, "Error: the object does not match the output schema: " + err.Error() + ". Fix it and call structured_output again."
	}
	b, _ := json.Marshal(v)
	return b, "Structured output recorded."
}

// captureTool only describes structured_output to the model; the loop
// validates and records its calls itself.
type captureTool struct{ schema json.RawMessage }

func (c captureTool) Def() llm.ToolDef {
	return llm.ToolDef{
		Name:        CaptureToolName,
		Description: "Deliver your final result as a JSON object matching this tool's input schema. Call it once your work is done; if it answers with an error, fix the object and call it again.",
		Parameters:  c.schema,
	}
}

func (captureTool) Call(context.Context, json.RawMessage) (string, error) {
	return "", errors.New("structured_output is handled by the agent loop")
}
