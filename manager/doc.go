// Package manager owns every child's lifecycle: the provider registry,
// one-shot runs, and continuable children — their activations, inboxes,
// follow-ups, interrupts, reports, settlement notices and crash recovery —
// and the calls that ask who may act on a child (manager/authority). The rules it applies are its
// policies' (below). Providers contribute data (creation
// inputs, Provider.Prepare) and a driver that runs one turn
// (Provider.NewDriver); everything else is here. Every child — one-shot or
// continuable, in-process or external — is run by this package from its
// provider's driver, with one progress listener (agent.ProgressNotes) and
// one conversion of the turn's result; a provider has no lifecycle of its
// own. The Continuable ability (a marker) says a provider's drivers can
// also be rebuilt from the store for later turns; without it a provider
// runs one-shot children only.
//
// Guarantees:
//
//   - A request is checked (package validate; the deployment's default
//     depth cap is 3) before its provider is called.
//   - A child's id, and a message's, is committed to the store before it
//     is handed to anyone: StartContinuable returns only once the record
//     and the first prompt are committed (so a progress note naming the id
//     follows the commit), and a new child runs its first turn only then;
//     Followup and ReportFrom wait for their message. A queued message
//     leaves the stored inbox in the same commit as the journal events
//     that record it, so a crash keeps one or the other; a resume runs
//     what was left queued first, in order. That commit (the turn's
//     start) is made before the driver acts on its inputs — no model call
//     or process first — so a message a turn took never runs twice: a
//     crash after it closes the turn (persister.Writer.Add). Journal
//     events are written behind the turn by the child's own writer
//     (manager/persister), in order, batched per commit. An in-band turn
//     outcome is handed over only once the turn's events are committed.
//     AwaitTurn (tasks.go) lets a caller that sent
//     without waiting (a durable MCP task, whose id must be committed
//     first) wait in band after all, while the turn is still ahead.
//   - Nothing is counted as written that was not. A failed write is
//     retried (Options.WriteAttempts, with a doubling delay); one that
//     still fails stops the child: its caller gets PERSISTENCE_UNAVAILABLE
//     (a send, a report, a start) or a failed outcome saying so (a wait),
//     no id is handed out, the parent is told the child failed, and the
//     child's claim stays so the next start announces the epoch from
//     what the store holds. A new child whose record cannot be committed
//     is removed without a notice: nobody had its id, and it ran nothing.
//   - Each child has one inbox, its only turn queue; every message becomes
//     one FIFO turn (or, for a quiet report, rides along with the next).
//     A message never alters a turn in flight.
//   - Residency is derived, not stored: running (a turn in progress or
//     queued behind it), queued (its turn waits for admission), idle
//     (resident, waiting for its own children or holding a parked queue),
//     ready (stored only). What is stored is who holds a
//     resident child: a claim of this manager's owner (Options.OwnerID)
//     made in the child's creating write or at a cold resume, renewed every
//     third of Options.LeaseTTL while any child is resident, and revoked by
//     the settlement. A child claimed by another owner whose lease runs is
//     resident in another server: a send to it is admitted there (route
//     forwarded; see Several instances below), and Recover leaves it
//     alone. An interrupt of it is
//     recorded in the store (seam.Interrupts, with the claim's epoch) when
//     the store has that ability and seam.Waker; each resident activation
//     watches its child and consumes such a request, fenced by its claim,
//     as a local interrupt (a request of an earlier epoch is dropped).
//   - Every write of a resident child after its claim carries the claim's
//     fence (owner, epoch: epoch 1 for a new child's creating claim, read
//     back with ClaimOf after a resume's). A write the store refuses with
//     ErrOwned means another server took the child over: the writer is
//     broken without a retry, the activation stops (its turn cancelled,
//     nothing more written, no notice: the new owner announces the epoch),
//     the manager logs at warn "lost the claim of child X to another
//     owner", and a caller waiting on a turn, or sending to it, gets an
//     error saying so (NOT_RESUMABLE wrapping ErrOwned; a wait's outcome
//     is an error without the turn's output, which the journal never got).
//   - Once Recover ran, each lease renewal also sweeps (in a goroutine of
//     its own, one at a time, also while nothing is resident): claims of
//     other owners that look expired by Options.Clock are closed as
//     Recover closes them: taken over first, in a write fenced by the
//     claim as read (so a claim the store's clock still holds live, or
//     that another server took first, is left alone), which bumps the
//     epoch, so the former owner's lingering writes are refused from then
//     on; only then is the journal read and the epoch closed, in a write
//     fenced by the new claim. Then the messages queued for the child run
//     here, in order.
//   - When an activation settles, its direct parent gets exactly one
//     notice (source kind subagent-settled), unless the epoch's last turn
//     was already answered in band to a waiting caller. The notice is
//     committed in the same write as the settlement (ChildWrite.Notify:
//     into the owning parent's stored inbox, or a root principal's or a
//     stored parent's notice queue), so a revoked claim always has its
//     notice. It is put in a live parent's inbox in the same critical
//     section that drops the parent's ownership, so a parent never settles
//     without it. A root principal's notices are stored until its next
//     call takes them; a resumed agent's stored notices are admitted
//     before they leave the queue (a crash repeats one, never loses it).
//   - Recover closes each interrupted epoch — a claim whose owner is gone —
//     in one write (claim taken over, closing events, checkpoint, claim
//     revoked, notice); on a store other instances share it then runs the
//     messages queued for the child, as a sweep's takeover does (another
//     instance may have forwarded them to a dead owner). A child whose
//     journal cannot be read keeps its
//     claim, lists as corrupt (or unavailable), and its
//     parent gets a notice saying so and naming mcp-subagent doctor, once
//     per start while it stays unreadable.
//   - Who may act on a child is decided in one file, manager/authority: a send
//     by its direct parent only (a root caller of its principal for a root
//     child); an interrupt or a transcript read by any ancestor (the root
//     principal of its tree, its parent, an agent above it), never by the
//     child itself; a report by a resident continuable child, to its own
//     parent; a worktree removal by its root principal as a root caller.
//     Anything else is UNAUTHORIZED, with a message saying what is allowed.
//   - Interrupt of an id the store does not hold is a no-op; a store that
//     cannot say is PERSISTENCE_UNAVAILABLE. Progress notes stop when the
//     caller's wait returns. A start refused while draining revokes the
//     callback token minted for it.
//   - A one-shot run is its driver's one turn under the caller's ctx: its
//     driver is told the run is one-shot (DriverRequest.OneShot, so an
//     external CLI keeps no session); cancelled before the driver is
//     built, Start returns CANCELLED and emits no event; cancelled after,
//     the turn ends aborted. Dispose cancels, waits for the turn, closes
//     the driver and revokes the callback. Every run this manager runs is
//     local (Event.Local).
//   - A child sees its caller's conversation only as a read-only view
//     (ParentRef.CompletedTurns, the fork seed): nothing started below can
//     append to a parent's journal.
//   - The policies are packages the manager calls, each owning its rules
//     (see its package doc), at most one leaf lock, and knowing nothing of
//     the manager but what it is handed: manager/validate,
//     manager/admission (Options.MaxRunningChildren, MaxRunningTotal),
//     manager/budget (Options.Budget, StartRequest.Budget,
//     FollowupBudget), manager/retention (Prune, Retain),
//     manager/worktrees (isolation "worktree"), manager/questions (Answer),
//     manager/listing (List, ListDescendants, a transcript's entries) and
//     manager/wording (what a settlement notice and a report say),
//     manager/authority (who may act on a child), manager/interrupts
//     (an interrupt of a child resident at another instance),
//     manager/recovery (Recover, and the sweep at each lease renewal) and
//     manager/sessions (which root sessions are connected, here and at
//     other instances), manager/pacing (the tries of a follow-up that
//     meets a race between instances) and manager/remote (a child
//     resident at another instance, and a turn waited for there).
//     What they ask of the manager is in hosts.go and listing.go; how a
//     turn passes admission and its budget, in turn.go.
//   - Every turn takes an admission seat before its driver runs. A turn
//     past a cap is never refused: its child lists as queued, and ids are
//     handed out as usual; a waiting caller's wait can run out while the
//     turn is queued, and the child goes on as any handed-back one. A turn
//     stopped while queued (an interrupt) ends aborted without reaching
//     its driver, journaled as an aborted turn with its inputs, and
//     settles with its notice as any interrupted turn does. A caller
//     waiting in band (StartContinuable or Followup with wait, a one-shot
//     run of an agent) lends the child its slot; a background child
//     queues. A restart treats a queued turn as any turn a stop cut short:
//     Recover announces the child as stopped, its messages stay in the
//     stored inbox, and the next resume runs them first, each in its old
//     FIFO place (the stamp).
//   - Progress notes may be dropped; notices and results are not.
//   - A child's model and effort are what its provider's Prepare chose
//     (CreationInputs), kept in the descriptor (and the model in the header,
//     for listing rows) for every later turn and cold resume; a provider
//     that can no longer build that model makes the resume NOT_RESUMABLE.
//   - A transcript (Transcript) is read only by the principal of the
//     child's lineage, as a root caller or as an ancestor agent
//     (UNAUTHORIZED otherwise); it never loads or resumes the child: a
//     resident child's journal is read from memory (ahead of the store), a
//     stored one from the store, each text bounded by MaxTranscriptText. A
//     Watch signals a reader (coalesced) at each journal event of the
//     child's activations, the ones that start later included, and at each
//     settlement; its creator stops it.
//   - Close stops every resident child without a notice and leaves its
//     claim, exactly as a crash would (it only ends the lease, so the next
//     manager need not wait it out); Recover, on the next start, closes the
//     interrupted turns and announces each ended epoch.
//   - Store calls run under the caller's ctx where the manager has one and
//     the call is the caller's business (a send's lookup, a resume's reads
//     and claim, a start's admission); the child's writer, settlements,
//     notices, shutdown checkpoints and the reads of calls that take no ctx
//     (listing, Interrupt, TakeNotices) run under the manager's own context,
//     never cancelled by a caller or by Close, each call bounded (30s).
//
// Caveats: a failed settlement write stops the child and leaves its claim,
// so the next start announces the epoch again (its parent may hear twice).
// A settling child whose parent is live but does not own it (rare: the
// parent was settling when the child was resumed) has its notice stored
// after the settlement, not with it. A retry after a commit that failed
// but landed is detected for journal events and records (not for a bare
// inbox write, which could then be queued twice). A crash can lose the
// journal events of the last 10 ms or so of a turn (events nobody waits
// for linger that long, so a short turn commits them with its settlement)
// — never a child, a message whose id was handed out, or a turn's start. A failed renewal is logged and retried at the next tick; a manager
// whose lease ran out learns it only at its next write of each child
// (refused by the fence): a child with nothing to write stays resident
// here, idle, after another server took it over, until its next send.
// The sweep's first filter is this manager's clock: one running behind
// the store's takes expired claims over that much later. The
// checkpoint written at shutdown (SetCheckpoint) carries no fence; the
// store keeps it only while its sequence matches the journal. A cold resume reads the
// journal before it claims the child: on a shared store, a journal another
// owner grew in between makes the resumed child's first write fail (it
// stops), never a journal with a gap. A child interrupted with a parked queue stays resident until its
// parent sends again; if the server stops first, the queue waits in the
// store for the next resume. An agent blocked in list_agents' wait_seconds
// holds its slot: it lends it only to turns it waits for in band. Stamps
// follow the wall clock across a restart; a clock set back can reorder
// turns queued before and after it.
//
// # Several instances
//
// Managers of several servers may share one store (DESIGN §10; PostgreSQL).
// Any of them takes any call; the child stays where it is resident, and
// the store carries the call (cluster.go):
//
//   - A follow-up for a child another live owner holds is admitted to the
//     child's stored inbox by the receiving manager (committed before its
//     id is handed out, route forwarded) and wakes the owner (seam.Waker).
//     The owner's activation adopts what others admitted — at each
//     wake-up of its child and before it takes each message — in the FIFO
//     order of the admission stamps, one turn each. A child whose owner
//     settles meanwhile is resumed by whichever of the two claims it
//     first: the sender, seeing the claim gone after its admission, or the
//     former owner, which reads its stored inbox once more after settling.
//     On a store no other instance writes (seam.Shared: bbolt) none of
//     these reads happen: only this manager admits to its children.
//   - A caller waiting on such a follow-up waits on the store: woken at
//     each turn's end, it reads the journal from where it stood before the
//     admission for the turn whose input is the message, so it gets the
//     answer of whichever owner runs it (after a takeover, the new one's;
//     a turn cut off is closed aborted). It gets what the journal holds —
//     output, stop reason, diagnostic, usage. As at the owner, an answer
//     it got in band stands in for the settlement notice: the message is
//     admitted awaited, a caller that gives up marks it abandoned
//     (seam.AwaitMarks) before its last read, and the settlement takes the
//     marks once the turns' ends are committed, issuing the notice only
//     for a marked one; so the answer is never lost, and is repeated only
//     when the caller gave up in the instant the turn ended (manager/remote).
//   - A caller that sent such a follow-up without a wait and waits on it
//     after all (an MCP task: AwaitSent) waits on the store the same way,
//     from where the journal stood before the admission.
//   - Listing at any instance shows a child resident elsewhere (a claim of
//     another owner, live by this manager's clock) with its owner's status
//     as the store shows it (running, idle); so does its transcript
//     (Transcript). Its questions are not listed there: they live in the
//     owner's memory.
//   - A transcript Watch of a child not resident here follows the store's
//     wake-ups, whichever instance committed what they signal: each
//     commit to the child's journal (seam.JournalKey: a turn's steps and
//     its end), an admission and a settlement (the child's id). So the web
//     view and the transcript resources' subscriptions are live at any
//     instance, a turn's steps as soon as its owner commits them. The
//     steps signal a key of their own, so the owner's waiters on the
//     child's id (its inbox, interrupts) are not woken by each one.
//   - A child whose writes failed here (the store was down) keeps its
//     claim, which this manager's renewals keep live, so no other instance
//     takes it over: the sweep closes and announces such an epoch of its
//     own once the store answers again, and runs what was queued for it.
//   - A notice for a root principal stored at any instance wakes the
//     principal's waiting call at every instance (WaitNotices, WaitSignal
//     on a principal's address) and is taken once (Store.TakeNotices).
//   - Session liveness, on a store that shares it (seam.Sessions;
//     package sessions): a root session's first call at an instance
//     (SessionOpened) records it as connected there, under the instance's
//     lease; its disconnect (SessionGone, or the renewal finding it no
//     longer connected here) removes the record, and each renewal removes
//     those of instances whose lease ran out. A notice waits for its
//     session while that session is connected here or recorded at another
//     instance; a removal wakes the principal's waiting calls at every
//     instance, so the notice goes to the principal's next call anywhere,
//     once. bbolt has no other instance: liveness stays local there.
//
// What stays per instance, and why:
//
//   - A subtree is resident on one instance: an agent's children are
//     started by its own turn, which runs where it is resident, and sends
//     to an agent's children come from that agent only. So the parent
//     lookups for delivery (activation.parent, owned), the wake-up
//     channels of agents (pendingSig for agent addresses) and the ancestor
//     checks of live children are in memory. A takeover moves children
//     one by one, so after one a parent and its child may live on two
//     instances: the child's notice then goes through the store (the
//     parent's stored inbox), as it does for a parent that is not resident.
//   - Admission seats (MaxRunningChildren, MaxRunningTotal) count the
//     turns in flight on this instance: a cap is per instance, and a
//     caller waiting at another instance lends the turn no slot.
//   - Budget ledgers live where the child is resident; a ledger is rebuilt
//     from the journal on every resume, so a takeover keeps the limits.
//   - The questions a child asks live in its owner's memory: they are
//     listed, answered (Answer, AnswerVia, a send_message that answers)
//     and offered to a waiting call (OfferQuestions) at that instance
//     only. At another instance the child lists without them, and a
//     message sent there is a follow-up, forwarded and queued behind the
//     turn that asks, not an answer.
//
// # Lock order
//
// The package has four mutexes. A goroutine holding one may take only
// those listed below it (outer first), and none nests in itself: one
// activation's mu is never taken while another's is held, parent or child.
//
//  1. Manager.resumeMu — serialises cold resumes with each other and with
//     what must not race one: a prune's deletes (policyHost.Remove),
//     RemoveWorktree, and a takeover's claim, read and settlement
//     (package recovery's, run in policyHost.Exclusive).
//  2. Manager.mu — the registry and the maps of the living: providers,
//     listeners, one-shot runs, live activations, pending signals,
//     corrupt children, lastCreated, closed, renewing, retaining. (The
//     root sessions recorded here and their signal are
//     sessions.Tracker.mu's, below.)
//  3. activation.mu — one child's inbox, parked queue, turn in flight,
//     owned children, waiters, settling, last result and usage.
//  4. Watch.mu — one transcript watch's journal subscription.
//
// The last is a leaf: nothing is taken while it is held. Below them all
// rank the locks of the packages under manager/: the child's writer's
// persister.Writer.mu (one child's pending write and its counters; its
// sync.Cond drained waits on it), and the policies' budget.Book.mu,
// admission.Queue.mu, worktrees.Keeper.mu, questions.Board.mu and
// sessions.Tracker.mu (taken under Manager.mu by the renewer). Each is
// a leaf, taken only inside its package, which never calls the manager
// while holding it (such a package imports nothing of the manager; a
// Host, Store or callback it is given is called with no lock of its own
// held), so as far as the order goes a call into one may be made under
// any lock above; one that does I/O (a store read, git) falls under the
// rule below like any other (a writer's store calls run on its own
// goroutine). TestPoliciesHoldNoLockAcrossACall checks their side;
// TestLockOrder does not follow calls into them, nor into agent (a
// journal's locks, and agent.TurnProgress's switch of a first turn's
// progress notes, held across the note's send).
//
// Only Manager.resumeMu may be held across a call into a Store, a
// Provider, a Continuable's NewDriver or a Driver: a resume reads, claims
// and builds its driver under it, which is what it serialises, a prune
// deletes under it, and a takeover claims, reads and settles under it. No other lock is held across I/O or a turn.
// Accessors that return data the callee already holds may be called under
// any lock: Provider.Name, Provider.Capabilities,
// Provider.InheritsParentContext, Describer.Description, ModelNamer.Models,
// Driver.Journal.
//
// Listeners (Subscribe) are called with no lock held: emit copies them out
// of Manager.mu first.
//
// TestLockOrder checks this list against the source, statically
// (lockorder_test.go says what it sees and what it does not).
package manager
