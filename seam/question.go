package seam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// QuestionKind is what a child asks.
type QuestionKind string

const (
	// QuestionApproval asks leave for an action (an ACP agent's
	// session/request_permission); its Choices are the options' words.
	QuestionApproval QuestionKind = "approval"
	// QuestionFree asks for free text.
	QuestionFree QuestionKind = "question"
)

// Who answered a question (Answer.By).
const (
	ByPerson    = "person"    // someone who may send to the child answered
	ByPolicy    = "policy"    // the provider's permission policy answered
	ByDeadline  = "deadline"  // nobody answered in time: the policy's answer was given
	ByInterrupt = "interrupt" // the child's turn ended first: nobody's answer
)

// How a question was settled (Answer.Outcome).
const (
	OutcomeAccepted  = "accepted"
	OutcomeDeclined  = "declined"
	OutcomeTimedOut  = "timed out"
	OutcomeCancelled = "cancelled"
)

// QuestionVersion is the version of a stored question this build writes.
// A decoder takes every version from 1 to it and ignores fields it does
// not know, so a later build may add fields an earlier one passes over.
const QuestionVersion = 1

// Question is a child's pending (or answered) question to the person: a
// durable record, stored before anyone is told of it, and stored again
// with its Answer.
type Question struct {
	ID      string       `json:"id"`
	ChildID string       `json:"child_id"`
	Kind    QuestionKind `json:"kind"`
	Message string       `json:"message"`
	// Choices are the words an approval may be answered with (the ACP
	// options' names); empty for a free question.
	Choices  []string  `json:"choices,omitempty"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline,omitzero"` // zero: none
	Answer   *Answer   `json:"answer,omitempty"`  // nil: still pending
}

// Answer is how a question was answered, and by whom.
type Answer struct {
	// Text is the answer: "allow", "deny" or an option's words for an
	// approval; free text for a question.
	Text    string    `json:"text"`
	By      string    `json:"by"`      // ByPerson, ByPolicy, ByDeadline, ByInterrupt
	Outcome string    `json:"outcome"` // OutcomeAccepted, ...
	At      time.Time `json:"at"`
	// Via is the way a person's answer came when it was not a tool call
	// (send_message): ViaWebView; empty otherwise.
	Via string `json:"via,omitempty"`
}

// ViaWebView marks an answer given in the web view (Answer.Via).
const ViaWebView = "web view"

// Pending reports whether q still waits for its answer.
func (q Question) Pending() bool { return q.Answer == nil }

// storedQuestion is a Question's stored form: the version beside it.
type storedQuestion struct {
	V int `json:"v"`
	Question
}

// EncodeQuestion is q's stored form (versioned JSON).
func EncodeQuestion(q Question) ([]byte, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	return json.Marshal(storedQuestion{V: QuestionVersion, Question: q})
}

// DecodeQuestion reads a stored question; bytes that are not one (a
// version this build does not know, a missing id or child, an unknown
// kind) are an error wrapping ErrCorrupt.
func DecodeQuestion(b []byte) (Question, error) {
	var s storedQuestion
	if err := json.Unmarshal(b, &s); err != nil {
		return Question{}, fmt.Errorf("%w: question: %v", ErrCorrupt, err)
	}
	if s.V < 1 || s.V > QuestionVersion {
		return Question{}, fmt.Errorf("%w: question version %d (this build reads 1 to %d)", ErrCorrupt, s.V, QuestionVersion)
	}
	if err := s.Question.check(); err != nil {
		return Question{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(s.Choices) == 0 {
		s.Choices = nil // omitted when encoded: one value for "none"
	}
	return s.Question, nil
}

// check refuses a question no store should hold.
func (q Question) check() error {
	switch {
	case q.ID == "":
		return errors.New("question: no id")
	case q.ChildID == "":
		return errors.New("question " + q.ID + ": no child")
	case q.Kind != QuestionApproval && q.Kind != QuestionFree:
		return fmt.Errorf("question %s: unknown kind %q", q.ID, q.Kind)
	}
	return nil
}

// Check reports why q cannot be stored (nil: it can).
func (q Question) Check() error { return q.check() }

// Questioner is the part of a store that keeps children's questions. Every
// Store has it (Store embeds it); it is its own interface so the manager's
// question code names only what it uses.
type Questioner interface {
	// PutQuestion stores q under its child (q.ChildID), replacing a stored
	// question of the same id: how a question is asked and how its answer
	// is recorded. It returns an error wrapping ErrNotFound for a child the
	// store does not hold, and refuses a question Check refuses. Delete
	// removes a child's questions with it.
	PutQuestion(ctx context.Context, q Question) error
	// Questions returns the child's questions, pending and answered, in
	// creation order (Question.Created), ties by id.
	Questions(ctx context.Context, childID string) ([]Question, error)
}

// SortQuestions puts qs in the order Questioner.Questions returns them.
func SortQuestions(qs []Question) {
	slices.SortStableFunc(qs, func(a, b Question) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// DefaultQuestionTimeout is how long a question waits for the person when
// the provider's config sets no question_timeout_seconds.
const DefaultQuestionTimeout = 10 * time.Minute

// AskRequest is a question a provider's driver puts to the person.
type AskRequest struct {
	Kind    QuestionKind
	Message string
	// Choices are the words an approval may be answered with besides
	// "allow" and "deny"; Declines are those of them that refuse.
	Choices, Declines []string
	// Timeout is how long the person has; zero: no deadline.
	Timeout time.Duration
	// Fallback is the policy's answer, given when the deadline passes or
	// the question cannot be stored ("deny").
	Fallback string
}

// AskFunc puts a question to the person for a child and waits for its
// answer: the person's (ByPerson), the policy's at the deadline
// (ByDeadline, OutcomeTimedOut), or none once ctx ends (ByInterrupt,
// OutcomeCancelled). It returns the question with its Answer set (never
// nil; the ID is empty when the question could not be stored and the
// policy answered, ByPolicy). It is safe to call from any goroutine and at
// the same time.
type AskFunc func(ctx context.Context, r AskRequest) Question
