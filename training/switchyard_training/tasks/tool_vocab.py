"""The words procedurally generated tools are made of, in two disjoint vocabularies: one for training, one for
the suites that measure tool use on tools the model never saw (`TRAIN_TOOL_VOCAB`, `HELDOUT_TOOL_VOCAB`).

A tool is an action on an object of some domain (`book` + `table` in a restaurant domain: `book_table`), with
parameters drawn from `tool_factory`'s slots. The held-out vocabulary shares no object, domain, action verb or
request phrasing with the training one (a test checks), so a held-out tool's name and description, and the
way its request is worded, are all new to the model: choosing it means reading the offered list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from switchyard_training.entities import invented_words


@dataclass(frozen=True)
class Action:
    """A verb a tool's name starts with, the verb phrases a request uses for it and its description's verb."""

    name: str
    """The name part: `book` in `book_table`."""
    request_verbs: tuple[str, ...]
    """How users say it, base form ('book', 'reserve'); the first is the description's."""
    sense: str = ""
    """Actions of one sense ('read': get, find, list) are too close to tell apart by a request's verb, so one
    setting never offers two of them on one object, nor declines one while offering another."""

    @property
    def meaning(self) -> str:
        return self.sense or self.name

    @property
    def describes(self) -> str:
        verb = self.request_verbs[0]
        head, _, rest = verb.partition(" ")
        third = head + ("es" if head.endswith(("s", "sh", "ch", "x")) else "s")
        if head.endswith("y") and head[-2:-1] not in "aeiou":
            third = head[:-1] + "ies"
        return f"{third} {rest}".strip()


@dataclass(frozen=True)
class Domain:
    """The objects of one field of work; tools of a domain are its actions on its objects."""

    name: str
    objects: tuple[str, ...]


@dataclass(frozen=True)
class ToolVocab:
    """Everything a split draws tools and requests from."""

    domains: tuple[Domain, ...]
    actions: tuple[Action, ...]
    commands: tuple[str, ...]
    """Request frames; `{verb}` is an action's request verb, `{object}` the object with its article."""
    questions: tuple[str, ...]
    descriptions: tuple[str, ...]
    """Tool description frames: `{verbs}` (third person), `{object}`, `{domain}`."""
    declines: tuple[str, ...]
    """Replies when no offered tool does what is asked: `{verb}`, `{object}`."""


def _domains(spec: str) -> tuple[Domain, ...]:
    out = []
    for line in spec.strip().splitlines():
        name, _, objects = line.partition(":")
        out.append(Domain(name.strip(), tuple(o.strip() for o in objects.split(",") if o.strip())))
    return tuple(out)


def _actions(spec: str) -> tuple[Action, ...]:
    out = []
    for line in spec.strip().splitlines():
        head, _, verbs = line.partition(":")
        name, _, sense = head.partition("[")
        out.append(
            Action(name.strip(), tuple(v.strip() for v in verbs.split(",") if v.strip()), sense.strip(" ]"))
        )
    return tuple(out)


TRAIN_TOOL_VOCAB = ToolVocab(
    domains=_domains("""
        restaurant: table, reservation, menu, dish, review
        travel: flight, hotel room, itinerary, boarding pass, rental car
        finance: invoice, payment, expense, budget, receipt
        support: ticket, complaint, return request, support case
        calendar: meeting, event, reminder, appointment
        music: playlist, song, album, concert
        retail: order, cart, coupon, product listing, shipment
        hr: employee record, leave request, timesheet, job posting
        fitness: workout, training plan, step count, gym class
        education: course, assignment, exam, lesson
        real estate: apartment, listing, viewing, lease
        logistics: package, delivery, warehouse slot, pallet
        health: prescription, doctor visit, lab result, vaccination
        devops: deployment, server, incident, backup
        crm: lead, contact, deal, account note
        library: book, loan, reading list
        cooking: recipe, shopping list, meal plan
        social: post, comment, follower
        weather station: forecast, sensor reading
        files: document, folder, spreadsheet
        transit: bus route, train ticket, parking spot
        pets: vet visit, pet profile, feeding schedule
    """),
    actions=_actions("""
        get [read]: get, look up, fetch
        find [read]: find, search for
        create [make]: create, make, set up
        cancel [end]: cancel, call off
        update: update, change, edit
        list [read]: list, show
        delete [end]: delete, remove
        book [make]: book, reserve
        send [give]: send
        check [read]: check
        schedule [make]: schedule, plan
        add [make]: add
        track [read]: track, follow
        rate [judge]: rate, score
        approve: approve, sign off
        archive [end]: archive, file away
        share [give]: share
        count [read]: count
        estimate [judge]: estimate, work out
        compare [judge]: compare
    """),
    commands=(
        "{Verb} {object}{args}.",
        "Please {verb} {object}{args}.",
        "I need to {verb} {object}{args}.",
        "Can you {verb} {object}{args}?",
        "Could you {verb} {object}{args}?",
        "I'd like to {verb} {object}{args}.",
        "{verb} {object}{args}",
        "Let's {verb} {object}{args}.",
        "We should {verb} {object}{args}.",
        "Hey, {verb} {object}{args} please.",
        "I want to {verb} {object}{args}.",
        "Kindly {verb} {object}{args}.",
    ),
    questions=(
        "Can you {verb} {object} for me{args}?",
        "Is it possible to {verb} {object}{args}?",
        "Would you {verb} {object}{args}?",
    ),
    descriptions=(
        "{Verbs} {object}.",
        "{Verbs} {object} in the {domain} system.",
        "Use this to {verb} {object}.",
        "{Verbs} {object} by the given fields.",
        "Tool that {verbs} {object}.",
        "{Verbs} {object}; returns the result as JSON.",
    ),
    declines=(
        "None of the available tools can {verb} {object}.",
        "I can't {verb} {object} with the tools I have.",
        "I don't have a tool to {verb} {object}, sorry.",
        "There is no tool here that can {verb} {object}.",
    ),
)
"""What the training corpus' procedural tools are made of."""

HELDOUT_TOOL_VOCAB = ToolVocab(
    domains=_domains("""
        gardening: seedling, greenhouse, planting bed, compost bin
        aviation: hangar, logbook, runway permit
        museum: exhibit, audio guide, gallery tour, artifact
        brewing: batch, fermenter, tasting sheet
        sailing: mooring, regatta, sail inventory
        theatre: rehearsal, costume, stage cue, matinee
        dairy farm: herd census, milking rota, fodder bale
        postal: parcel, postage label, mailbox
        astronomy: telescope session, star chart, observation
        insurance: policy quote, claim, premium
        laboratory: sample, reagent, experiment
        carpentry: workbench, lumber crate, cut diagram
    """),
    actions=_actions("""
        renew: renew, extend
        ship [move]: ship, dispatch
        refund: refund, reimburse
        rename [name]: rename, relabel
        publish [out]: publish, release
        verify [check]: verify, validate
        register: register, enroll
        transfer [move]: transfer, move
        pause: pause, suspend
        resume: resume, restart
        inspect [check]: inspect, examine
        quote: quote, price
        print [out]: print
        tag [name]: tag, label
    """),
    commands=(
        "Go ahead and {verb} {object}{args}.",
        "I want you to {verb} {object}{args}.",
        "Help me {verb} {object}{args}.",
        "Any chance you could {verb} {object}{args}?",
        "{Verb} {object}{args} pls",
        "Time to {verb} {object}{args}.",
        "Need you to {verb} {object}{args}.",
        "Would you be able to {verb} {object}{args}?",
    ),
    questions=(
        "Are you able to {verb} {object}{args}?",
        "Mind helping me {verb} {object}{args}?",
    ),
    descriptions=(
        "{Verbs} {object} for the {domain} team.",
        "Endpoint that will {verb} {object}.",
        "Call this when you must {verb} {object}.",
        "{Domain} service: {verbs} {object}.",
    ),
    declines=(
        "No tool on offer lets me {verb} {object}.",
        "The tools I was given cannot {verb} {object}.",
    ),
)
"""What the `unseen-tools` suites' tools are made of: no word of a name, domain or frame is in training's."""


def _vocab_words(vocab: ToolVocab) -> set[str]:
    words = {w for d in vocab.domains for w in (*d.name.split(), *(x for o in d.objects for x in o.split()))}
    return (
        words
        | {a.name for a in vocab.actions}
        | {w for a in vocab.actions for v in a.request_verbs for w in v.split()}
    )


def with_invented(vocab: ToolVocab, domains: int, actions: int, seed: int, banned: set[str]) -> ToolVocab:
    """`vocab` plus `domains` invented domains (three or four invented objects each, half of them an invented
    word before a real one: "zelkor permit") and `actions` invented actions. A model trained on a few dozen
    real objects learns to write those names from memory (run 33 wrote "findfindfind..." for every held-out tool
    name, training/RESULTS.md); names it cannot have memorised leave reading them off the offered list."""
    words = invented_words(domains * 5 + actions, seed, banned | _vocab_words(vocab))
    heads = [o.split()[-1] for d in vocab.domains for o in d.objects]
    new_domains = []
    for i in range(domains):
        name, *own = words[i * 5 : i * 5 + 5]
        objects = tuple(
            f"{w} {heads[(i + j) % len(heads)]}" if j % 2 else w for j, w in enumerate(own[: 3 + i % 2])
        )
        new_domains.append(Domain(name, objects))
    new_actions = tuple(Action(w, (w,)) for w in words[domains * 5 :])
    return replace(vocab, domains=vocab.domains + tuple(new_domains), actions=vocab.actions + new_actions)


WIDE_TRAIN_TOOL_VOCAB = with_invented(TRAIN_TOOL_VOCAB, domains=400, actions=300, seed=57,
                                      banned=_vocab_words(HELDOUT_TOOL_VOCAB))  # fmt: skip
"""The training vocabulary widened with invented domains, objects and actions (`with_invented`). Not yet the
corpus default: no run has trained on it (the next bundled-model run decides, training/RESULTS.md run 33)."""
