// Package agent owns the in-process agent: its journal of sequenced events
// and the turn loop that drives a chat model and the tools it calls.
//
// The journal's record types (Event, Journal, StopReason, Input,
// TurnResult) are the store and provider contract and are defined in seam;
// the names here are aliases of them. A recorded message is seam.Message,
// the model's llm.Message: the loop converts between the two (record,
// chat), so llm and seam need not know each other.
//
// A journal counts events from 0 without gaps. Every turn is a turn/start,
// the messages of the turn, and a turn/end carrying the turn's stop reason;
// every tool call the model makes is answered by a tool message before the
// turn ends, even when the turn is cancelled or cut off, so any journal (and
// any prefix ending at a turn/end) can be replayed to a model. Validate
// checks these invariants. The journal's readers live here too:
// CompletedPrefix (a fork's seed), Messages (the transcript a model sees),
// LastOutcome (how the last turn ended), LastSession, CloseOpenTurn,
// which ends a turn a crash left open so the journal is replayable again,
// and LastGrant and Spent, which read a budget back: a budget event (its
// Grant, written by the manager before the turn it applies to) and what
// the events after it spent, a crashed turn's time ending at its last
// event rather than when it was closed.
//
// The journal owns its stored format (wire.go): EncodeEvent and DecodeEvent
// map an Event to one JSON record with fields of its own, so a change to
// seam or llm cannot change what is on disk. Version 1, the format of
// every build so far, has no "v" field and is written byte for byte as before, so older
// builds read newer stores; a later incompatible format writes "v". Unknown
// fields are ignored. A record of a kind this build does not know, or of
// another version, folds to the sentinel EventUnknown, which keeps its
// sequence number and time and nothing else: it stays in the journal, in
// place, Validate accepts it anywhere, and every reader skips it, so a
// resumed model's transcript leaves it out. Only bytes that are not a record
// are an error. New kinds (budget, after 2026-12-01) stay within version 1:
// older builds fold them to the sentinel and lose only what they meant.
//
// The loop calls the model, runs the tool calls of one answer concurrently,
// records their results in call order, and repeats until the model answers
// without tool calls. Finish reasons map to stop reasons: length →
// max-tokens, refusal or content filter → refusal, a failed model call (after
// the client's retries) → error, cancellation → aborted. With an output
// schema the agent gets a structured_output tool; an invalid object is
// answered with the validation error so the model can retry, and a turn that
// never delivers a valid object ends with error.
//
// Depth, ownership and persistence are not the agent's: the manager owns
// them.
package agent
