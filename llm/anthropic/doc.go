// Package anthropic is the llm.Client for the Anthropic Messages API,
// over github.com/anthropics/anthropic-sdk-go/v2. What both backends guarantee is in
// the llm package doc; llm/transport holds what they share.
//
//   - transport.Config.BaseURL is the API root without /v1 ([DefaultBaseURL]),
//     as the SDK takes it; the key goes out as x-api-key.
//   - RoleSystem messages, wherever they are, become the system parameter.
//     Consecutive messages of one side merge into one message, so the tool
//     results of a round travel as tool_result blocks of the one user message
//     after the tool_use blocks, as the API requires. Tool call arguments
//     that are not a JSON object go back as {}. A refusal's text is the
//     API's, not the model's, and is not sent back; messages left with
//     nothing to send are left out.
//   - Events message_start … message_stop are read: text deltas go to
//     onDelta (text blocks split by a tool call are joined by a blank line),
//     tool_use blocks with their accumulated input_json_delta become
//     ToolCalls (no input: "{}"), thinking blocks are not part of the answer.
//     A stream without message_stop is broken; an `error` event is retried
//     unless its type is one another attempt cannot fix
//     (invalid_request_error, authentication_error, permission_error,
//     not_found_error, request_too_large, billing_error).
//   - Stop reasons: end_turn and stop_sequence are [FinishStop]; tool_use is
//     [FinishToolCalls]; max_tokens and model_context_window_exceeded are
//     [FinishLength]; refusal is [FinishRefusal] with Message.Refusal set to
//     the API's stop_details explanation (or a sentence naming the category);
//     pause_turn (server tools only, which are never offered) and unknown
//     reasons are [FinishStop], or [FinishToolCalls] when the answer calls
//     tools.
//   - max_tokens is required by the API: Request.MaxTokens, or
//     [DefaultMaxTokens] (16384) when zero.
//   - Usage.InputTokens is everything the API read: input_tokens plus
//     cache_creation_input_tokens plus cache_read_input_tokens; OutputTokens
//     is output_tokens. A [Priced] cost therefore charges cached tokens at the
//     full input price: an upper bound.
//   - Prompt caching: cache_control {type: ephemeral} marks the last system
//     block (or, with no system prompt, the last tool), caching the fixed
//     prefix, and the last content block of the newest message, caching the
//     whole history; the next call of the loop, a few blocks longer, reads
//     that prefix back from the cache. Two of the API's four breakpoints are
//     used. Prompts shorter than the model's minimum are simply not cached.
//   - Request.Effort goes out as output_config.effort, the API's own effort
//     control (same three words), rather than an extended-thinking budget:
//     thinking blocks must be sent back, signed, on tool-use turns, and
//     llm.Message has no place for them. Models that do not support effort
//     answer 400 invalid_request_error, which is not retried; leave effort
//     empty for them.
package anthropic
