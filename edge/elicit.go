package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/internal/seal"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A child's question put to the person during a waiting call (DESIGN
// §14, best channel first). While a root caller's call waits for its
// child's turn (a foreground subagent, send_message with wait_seconds)
// and its client declared elicitation (form mode), the child's questions
// come to the call (manager.OfferQuestions) instead of as notices:
//
//   - a client on protocol 2026-07-28 or later gets the call's result
//     as resultType "input_required": the question as an elicitation
//     input request keyed by the question's id, and a sealed requestState
//     (principal, tool, child, question, the turn's message; expiring
//     with the question, good for one retry). Its retry carries the
//     answer in inputResponses and the state back; the answer goes to the
//     child and the retry waits on for the same turn, as the first call
//     would have;
//   - an older client gets elicitation/create during the call.
//
// Accepted is the person's answer; declined or cancelled is the person's
// decline (manager.Decline). A question the client could not be asked
// (its request failed, the wait ended first) becomes the notice it would
// have been (manager.NoticeQuestion).

// Asker is the manager's side of it; *manager.Manager implements it.
type Asker interface {
	OfferQuestions(childID string) (<-chan seam.Question, func())
	NoticeQuestion(questionID string)
	Decline(ctx context.Context, caller seam.ParentRef, childID, questionID string) (*seam.Question, error)
	AwaitTurn(childID, msgID string, step func(string)) manager.Turn
}

var _ Asker = (*manager.Manager)(nil)

// asking is what the server keeps to ask: the manager's side, and the
// sealer of request states (its key lives as long as the process).
type asking struct {
	asker  Asker
	sealer *seal.Sealer
}

func newAsking(mgr Manager) (*asking, error) {
	a, ok := mgr.(Asker)
	if !ok {
		return nil, nil
	}
	sl, err := seal.New("mcp-subagent requestState")
	if err != nil {
		return nil, fmt.Errorf("the key that seals a question's requestState: %w", err)
	}
	return &asking{asker: a, sealer: sl}, nil
}

// askChannel is how the calling client can be asked.
type askChannel int

const (
	askNone      askChannel = iota
	askRoundTrip            // input_required (2026-07-28 and later)
	askRequest              // elicitation/create during the call
)

func formElicitation(c *mcp.ElicitationCapability) bool {
	return c != nil && (c.Form != nil || c.URL == nil)
}

func (s *Server) askChannel(ctx context.Context, c call) askChannel {
	if s.asking == nil || s.mcp == nil || c.caller.AgentID != "" {
		return askNone // an agent caller has no person to ask
	}
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		if info.ClientCapabilities != nil && formElicitation(info.ClientCapabilities.Elicitation) {
			return askRoundTrip
		}
		return askNone
	}
	if cs, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok && formElicitation(cs.GetClientCapabilities().Elicitation) {
		return askRequest
	}
	return askNone
}

// waitTurn waits for turn's outcome as turn.Wait(wctx) does, putting the
// child's questions to the person meanwhile when the client can be
// asked. asking, when not nil, is the call's result: an input_required
// result (or the error that kept the state from being made).
func (s *Server) waitTurn(ctx, wctx context.Context, c call, toolName string, sent manager.Sent) (res seam.Result, ok bool, asking *mcp.CallToolResult) {
	ch := s.askChannel(ctx, c)
	if ch == askNone {
		res, ok = sent.Turn.Wait(wctx)
		return res, ok, nil
	}
	questions, stop := s.asking.asker.OfferQuestions(sent.ChildID)
	defer stop()
	tctx, stopWait := context.WithCancel(wctx)
	defer stopWait()
	type outcome struct {
		res seam.Result
		ok  bool
	}
	done := make(chan outcome, 1)
	go func() {
		r, ok := sent.Turn.Wait(tctx)
		done <- outcome{r, ok}
	}()
	elicited := make(chan struct{}, 1) // an elicitation/create in flight ended
	var cancelAsk context.CancelFunc
	var held []seam.Question // asked while an elicitation is in flight
	defer func() {
		if cancelAsk != nil {
			cancelAsk()
			<-elicited
		}
		for _, h := range held {
			s.asking.asker.NoticeQuestion(h.ID)
		}
	}()
	for {
		select {
		case o := <-done:
			return o.res, o.ok, nil
		case <-elicited:
			cancelAsk = nil
			if len(held) > 0 {
				cancelAsk = s.elicitAsync(ctx, wctx, c, held[0], elicited)
				held = held[1:]
			}
		case q := <-questions:
			if ch == askRequest {
				if cancelAsk != nil {
					held = append(held, q)
					continue
				}
				cancelAsk = s.elicitAsync(ctx, wctx, c, q, elicited)
				continue
			}
			// The retry waits for the turn again (AwaitTurn); this call
			// stops waiting and hands the question over.
			stopWait()
			if o := <-done; o.ok {
				s.asking.asker.NoticeQuestion(q.ID)
				return o.res, true, nil
			}
			if err := sent.Turn.Committed(); err != nil {
				s.asking.asker.NoticeQuestion(q.ID)
				return seam.Result{}, false, errorResult(err)
			}
			r, err := s.inputRequired(c, toolName, sent, q)
			if err != nil {
				s.log.Error("sealing a question's requestState failed; it goes as a notice", "question", q.ID, "err", err)
				s.asking.asker.NoticeQuestion(q.ID)
				return seam.Result{}, false, mcp.NewToolResultError("Error: INTERNAL: " + err.Error())
			}
			return seam.Result{}, false, r
		}
	}
}

// elicitAsync puts q to the person with elicitation/create, bounded by the
// wait and the question's deadline, and applies the answer; it signals
// done when finished. The returned func cancels it.
func (s *Server) elicitAsync(ctx, wctx context.Context, c call, q seam.Question, done chan<- struct{}) context.CancelFunc {
	ectx, cancel := context.WithCancel(wctx)
	if !q.Deadline.IsZero() {
		cancel() // not leaked: the deadline's context replaces it
		ectx, cancel = context.WithDeadline(wctx, q.Deadline)
	}
	go func() {
		defer func() { done <- struct{}{} }()
		res, err := s.mcp.RequestElicitation(ectx, mcp.ElicitationRequest{
			Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)}, Params: elicitationOf(q)})
		if err != nil || res == nil {
			s.log.Info("the client could not be asked a child's question; it goes as a notice", "question", q.ID, "err", err)
			s.asking.asker.NoticeQuestion(q.ID)
			return
		}
		s.applyAnswer(ctx, c.caller, q, &res.ElicitationResponse)
	}()
	return cancel
}

// answerKey is the field of the elicitation form that holds the answer.
const answerKey = "answer"

// elicitationOf is q as a form for the person: one field, the answer;
// for an approval, the words it takes.
func elicitationOf(q seam.Question) mcp.ElicitationParams {
	field := map[string]any{"type": "string", "title": "Your answer"}
	msg := fmt.Sprintf("Subagent %s asks: %s", q.ChildID, q.Message)
	if q.Kind == seam.QuestionApproval {
		words := q.Choices
		if len(words) == 0 {
			words = []string{"allow", "deny"}
		}
		field["enum"] = words
		msg += " (declining denies it)"
	}
	return mcp.ElicitationParams{Mode: mcp.ElicitationModeForm, Message: msg, RequestedSchema: map[string]any{
		"type": "object", "properties": map[string]any{answerKey: field}, "required": []string{answerKey}}}
}

// applyAnswer gives q the person's answer r: accepted with the answer
// (an approval accepted with none allows), declined or cancelled as the
// person's decline. An answer the question does not take leaves it
// waiting, as a notice.
func (s *Server) applyAnswer(ctx context.Context, caller seam.ParentRef, q seam.Question, r *mcp.ElicitationResponse) {
	var err error
	text := ""
	if m, ok := r.Content.(map[string]any); ok {
		text, _ = m[answerKey].(string)
	}
	switch {
	case r.Action == mcp.ElicitationResponseActionAccept && strings.TrimSpace(text) != "":
		_, err = s.messenger.Answer(ctx, caller, q.ChildID, q.ID, text)
	case r.Action == mcp.ElicitationResponseActionAccept && q.Kind == seam.QuestionApproval:
		_, err = s.messenger.Answer(ctx, caller, q.ChildID, q.ID, "allow")
	default:
		_, err = s.asking.asker.Decline(ctx, caller, q.ChildID, q.ID)
	}
	if err != nil {
		s.log.Info("the person's answer was not taken", "question", q.ID, "action", r.Action, "err", err)
		s.asking.asker.NoticeQuestion(q.ID)
		return
	}
	s.log.Info("a child's question was answered through the client", "agent_id", q.ChildID, "question", q.ID, "action", r.Action)
}

// requestState is what a sealed requestState carries.
type requestState struct {
	Principal string            `json:"principal"`
	Tool      string            `json:"tool"`
	Child     string            `json:"child"`
	Question  string            `json:"question"`
	Kind      seam.QuestionKind `json:"kind"`
	Message   string            `json:"message"`
	Route     manager.Route     `json:"route,omitempty"`
}

// stateTTL is how long a state lasts for a question without a deadline.
const stateTTL = time.Hour

func (s *Server) inputRequired(c call, toolName string, sent manager.Sent, q seam.Question) (*mcp.CallToolResult, error) {
	st := requestState{Principal: c.caller.Principal, Tool: toolName, Child: sent.ChildID, Question: q.ID, Kind: q.Kind, Message: sent.MessageID, Route: sent.Route}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	exp := q.Deadline
	if exp.IsZero() {
		exp = time.Now().Add(stateTTL)
	}
	tok, err := s.asking.sealer.Seal(b, exp)
	if err != nil {
		return nil, err
	}
	s.log.Info("a child's question goes to the client as input_required", "agent_id", q.ChildID, "question", q.ID)
	return server.NewInputRequestBuilder(tok).Elicit(q.ID, elicitationOf(q)).ToolResult(), nil
}

type resumedKey struct{}

// resumed is the turn a retried call waits for again.
type resumed struct {
	child, message string
	route          manager.Route
	turn           manager.Turn
}

func resumedFrom(ctx context.Context) *resumed {
	r, _ := ctx.Value(resumedKey{}).(*resumed)
	return r
}

// resume takes a retried call's answer (its inputResponses under its
// requestState): it refuses a state that was not sealed here, was
// altered, has expired, was used already, or was issued to another
// principal or for another tool; else it gives the question its answer
// and marks ctx so the tool waits for the same turn again.
func (s *Server) resume(ctx context.Context, toolName string, c call, rt mcp.MultiRoundTripParams) (context.Context, *mcp.CallToolResult) {
	caller := c.caller
	refuse := func(format string, a ...any) (context.Context, *mcp.CallToolResult) {
		return ctx, mcp.NewToolResultError("Error: INVALID_REQUEST: field \"requestState\": " + fmt.Sprintf(format, a...))
	}
	if s.asking == nil || caller.AgentID != "" {
		return refuse("this server asked this caller nothing; call the tool without inputResponses and requestState")
	}
	if rt.RequestState == "" {
		return refuse("missing: a retry with inputResponses carries the requestState of the result that asked")
	}
	o, err := s.asking.sealer.Open(rt.RequestState)
	switch {
	case errors.Is(err, seal.ErrExpired):
		return refuse("refused: %v (the question's time ran out and its policy answered); list_agents shows the subagent", err)
	case err != nil:
		return refuse("refused: %v; a server restart voids earlier states: list_agents shows the subagent and its questions", err)
	}
	var st requestState
	if err := json.Unmarshal(o.Payload, &st); err != nil {
		return refuse("refused: it does not read")
	}
	if st.Principal != caller.Principal {
		return refuse("refused: it was issued to another principal")
	}
	if st.Tool != toolName {
		return refuse("refused: it was issued for tool %s, not %s", st.Tool, toolName)
	}
	if args, ok := c.args.(map[string]any); ok && toolName == "send_message" && args["subagent_id"] != st.Child {
		return refuse("refused: it was issued for subagent %s, not %v", st.Child, args["subagent_id"])
	}
	r := server.ElicitationResponse(rt.InputResponses, st.Question)
	if r == nil {
		return refuse("inputResponses holds no elicitation answer under %q, the question it asks", st.Question)
	}
	if err := s.asking.sealer.Spend(o); err != nil {
		return refuse("refused: %v (each state answers its question once); list_agents shows the subagent", err)
	}
	// Waiting again before the answer: the turn it lets finish is ours.
	turn := s.asking.asker.AwaitTurn(st.Child, st.Message, c.progress)
	q := seam.Question{ID: st.Question, ChildID: st.Child, Kind: st.Kind}
	s.applyAnswer(ctx, caller, q, &r.ElicitationResponse)
	return context.WithValue(ctx, resumedKey{}, &resumed{child: st.Child, message: st.Message, route: st.Route, turn: turn}), nil
}

// startContinuable starts the child, or, for a retried call, is the
// child it started and the turn it waits for.
func (s *Server) startContinuable(ctx context.Context, task *taskMode, provider string, sr seam.StartRequest, wait bool) (*manager.Started, error) {
	if r := resumedFrom(ctx); r != nil {
		return &manager.Started{ChildID: r.child, MessageID: r.message, Turn: r.turn}, nil
	}
	return s.startInTaskMode(ctx, task, provider, sr, wait)
}

// answerUnlessResumed is Messenger.Answer, except for a retried call,
// whose answer resume gave already.
func (s *Server) answerUnlessResumed(ctx context.Context, caller seam.ParentRef, childID, questionID, text string) (*seam.Question, error) {
	if resumedFrom(ctx) != nil {
		return nil, nil
	}
	return s.messenger.Answer(ctx, caller, childID, questionID, text)
}

// followup sends the message, or, for a retried call, is the message it
// sent and the turn it waits for.
func (s *Server) followup(ctx context.Context, c call, childID, content string, wait bool, budget *seam.Budget) (*manager.Sent, error) {
	if r := resumedFrom(ctx); r != nil { // resume checked it is childID's
		return &manager.Sent{ChildID: r.child, MessageID: r.message, Route: r.route, Turn: r.turn}, nil
	}
	return s.followupInTaskMode(ctx, c.task, c.caller, childID, content, wait, budget)
}
