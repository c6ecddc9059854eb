package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// AskUserTool is the tool an in-process child asks the person through
// (Options.AskUser): a free question, held until the person answers (the
// answer is the tool's result), the deadline passes (the policy's answer,
// recorded as timed out), or the turn ends.
const AskUserTool = "ask_user"

// noAnswer is the policy's answer to a question nobody answered in time.
const noAnswer = "no answer"

var askUserParams = json.RawMessage(`{"type":"object","properties":{"question":{"type":"string","description":"The question, self-contained: the person has not seen your work."}},"required":["question"],"additionalProperties":false}`)

type askUser struct {
	ask     seam.AskFunc
	timeout time.Duration
}

func (a askUser) Def() llm.ToolDef {
	return llm.ToolDef{Name: AskUserTool, Parameters: askUserParams, Description: fmt.Sprintf(
		"Ask the person who gave your parent its task a question, and wait for the answer (free text). Ask only what you cannot decide or find out yourself; nobody answering within %v is no answer.", a.timeout)}
}

func (a askUser) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var in struct {
		Question string `json:"question"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return "", fmt.Errorf("arguments: %v", err)
	}
	if strings.TrimSpace(in.Question) == "" {
		return "", errors.New(`field "question" must not be empty`)
	}
	q := a.ask(ctx, seam.AskRequest{Kind: seam.QuestionFree, Message: in.Question, Timeout: a.timeout, Fallback: noAnswer})
	switch ans := q.Answer; ans.By {
	case seam.ByPerson:
		return "The person answered: " + ans.Text, nil
	case seam.ByDeadline:
		return fmt.Sprintf("Nobody answered within %v (question %s timed out). Go on without the answer, and say in your result what you assumed.", a.timeout, q.ID), nil
	case seam.ByInterrupt:
		if err := ctx.Err(); err != nil {
			return "", err
		}
		return "", errors.New("the question was withdrawn")
	default:
		return "The question could not be put to the person. Go on without the answer, and say in your result what you assumed.", nil
	}
}
