package seam

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestQuestionRoundTrip(t *testing.T) {
	q := Question{ID: "q-1", ChildID: "agent-1", Kind: QuestionApproval, Message: "Write x?", Choices: []string{"Allow once"},
		Created: time.Unix(1, 5).UTC(), Deadline: time.Unix(601, 5).UTC(),
		Answer: &Answer{Text: "allow", By: ByPerson, Outcome: OutcomeAccepted, At: time.Unix(7, 0).UTC()}}
	b, err := EncodeQuestion(q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeQuestion(b)
	if err != nil || !reflect.DeepEqual(got, q) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, q)
	}
	// A later build's field is passed over; a later version is refused.
	if _, err := DecodeQuestion([]byte(`{"v":1,"id":"q","child_id":"c","kind":"question","schema":{}}`)); err != nil {
		t.Fatalf("an unknown field: %v, want it ignored", err)
	}
	for _, bad := range []string{`{"v":2,"id":"q","child_id":"c","kind":"question"}`, `{"id":"q","child_id":"c","kind":"question"}`,
		`{"v":1,"child_id":"c","kind":"question"}`, `{"v":1,"id":"q","child_id":"c","kind":"vote"}`, `[]`} {
		if _, err := DecodeQuestion([]byte(bad)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", bad, err)
		}
	}
}

// FuzzDecodeQuestion: stored bytes never panic the decoder, and what it
// accepts encodes back to bytes it reads the same.
func FuzzDecodeQuestion(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"q","child_id":"c","kind":"approval","message":"m","choices":["a"],"created":"2026-01-01T00:00:00Z","answer":{"text":"deny","by":"deadline","outcome":"timed out","at":"2026-01-01T00:10:00Z"}}`))
	f.Add([]byte(`{"v":1,"id":"q","child_id":"c","kind":"question"}`))
	f.Add([]byte(`{"v":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeQuestion(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("a decode error that is not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := EncodeQuestion(q)
		if err != nil {
			t.Fatalf("a decoded question does not encode: %v", err)
		}
		q2, err := DecodeQuestion(again)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if third, _ := EncodeQuestion(q2); string(third) != string(again) {
			t.Fatalf("not stable: %s vs %s", again, third)
		}
	})
}
