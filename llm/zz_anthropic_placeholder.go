package llm

import (
	"context"
	"errors"
)

// Anthropic is a placeholder for the Messages API client written on branch
// anthropic; this file is dropped at merge. Nothing may depend on its
// behaviour.
type Anthropic struct{}

var _ Client = (*Anthropic)(nil)

// NewAnthropic is a placeholder (see Anthropic).
func NewAnthropic(Config) *Anthropic { return &Anthropic{} }

// Complete always fails: the placeholder has no backend.
func (*Anthropic) Complete(context.Context, Request, func(string)) (Response, error) {
	return Response{}, errors.New("llm: the Anthropic client is a placeholder in this build")
}
