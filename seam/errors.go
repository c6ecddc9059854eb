package seam

import (
	"errors"
	"fmt"
)

// Code classifies a seam error.
type Code string

const (
	CodeNoProvider             Code = "NO_PROVIDER"
	CodeDuplicateProvider      Code = "DUPLICATE_PROVIDER"
	CodeUnsupportedCapability  Code = "UNSUPPORTED_CAPABILITY"
	CodeInvalidRequest         Code = "INVALID_REQUEST"
	CodeDepthExceeded          Code = "DEPTH_EXCEEDED"
	CodeNotResumable           Code = "NOT_RESUMABLE"
	CodeUnauthorized           Code = "UNAUTHORIZED"
	CodeParentUnavailable      Code = "PARENT_UNAVAILABLE"
	CodePersistenceUnavailable Code = "PERSISTENCE_UNAVAILABLE"
	CodeControlUnavailable     Code = "CONTROL_UNAVAILABLE"
	CodeDraining               Code = "DRAINING"
	CodeCancelled              Code = "CANCELLED"
)

// Error is the seam's typed error. errors.Is compares codes only, so
// errors.Is(err, ErrUnsupportedCapability) holds whatever the message.
type Error struct {
	Code     Code
	Message  string
	AgentID  string // the child concerned, when there is one
	Provider string // the provider concerned, when there is one
	Err      error  // the cause, if any
}

func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return fmt.Sprintf("%s: %v", e.Code, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNoProvider             = &Error{Code: CodeNoProvider}
	ErrDuplicateProvider      = &Error{Code: CodeDuplicateProvider}
	ErrUnsupportedCapability  = &Error{Code: CodeUnsupportedCapability}
	ErrInvalidRequest         = &Error{Code: CodeInvalidRequest}
	ErrDepthExceeded          = &Error{Code: CodeDepthExceeded}
	ErrNotResumable           = &Error{Code: CodeNotResumable}
	ErrUnauthorized           = &Error{Code: CodeUnauthorized}
	ErrParentUnavailable      = &Error{Code: CodeParentUnavailable}
	ErrPersistenceUnavailable = &Error{Code: CodePersistenceUnavailable}
	ErrControlUnavailable     = &Error{Code: CodeControlUnavailable}
	ErrDraining               = &Error{Code: CodeDraining}
	ErrCancelled              = &Error{Code: CodeCancelled}
)

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
