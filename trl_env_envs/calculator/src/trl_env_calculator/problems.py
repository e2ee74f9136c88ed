"""Arithmetic word problems with whole-number answers, generated from a seeded ``Random``.

The standard six templates need two or three operations on two- and three-digit numbers, so a
calculator helps; every answer is an exact integer, checked as a number. For curricula the
templates are also grouped by the operations they need (:data:`BY_OPERATIONS`, one to three).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from trl_env.tools import Task, TaskSet

NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jia")
ITEMS = ("stickers", "marbles", "stamps", "cards", "shells", "coins")


def randints(rng: random.Random, *bounds: tuple[int, int]) -> tuple[int, ...]:
    """One ``rng.randint(low, high)`` per ``(low, high)``, drawn in order."""
    return tuple(rng.randint(low, high) for low, high in bounds)


def packs(rng: random.Random) -> Task:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    have, n, per = rng.randint(10, 400), rng.randint(3, 40), rng.randint(6, 60)
    return Task(
        f"{name} has {have} {item}, then buys {n} packs of {per} {item} each. "
        f"How many {item} does {name} have now?",
        have + n * per,
    )


def change(rng: random.Random) -> Task:
    name = rng.choice(NAMES)
    price, count = rng.randint(3, 95), rng.randint(2, 12)
    bill = (price * count // 100 + 1 + rng.randint(0, 3)) * 100
    return Task(
        f"A notebook costs ${price}. {name} buys {count} notebooks and pays with ${bill}. "
        f"How many dollars of change does {name} get?",
        bill - price * count,
    )


def sharing(rng: random.Random) -> Task:
    item = rng.choice(ITEMS)
    friends, each, back = rng.randint(3, 25), rng.randint(20, 300), rng.randint(1, 19)
    return Task(
        f"{friends * each} {item} are shared equally among {friends} friends. Then every "
        f"friend gives {back} of them away. How many {item} does each friend have left?",
        each - back,
    )


def journey(rng: random.Random) -> Task:
    speed, hours, extra = rng.randint(40, 130), rng.randint(2, 14), rng.randint(5, 400)
    return Task(
        f"A train travels at {speed} km per hour for {hours} hours, then another {extra} km. "
        "How many km does it travel in total?",
        speed * hours + extra,
    )


def reading(rng: random.Random) -> Task:
    name = rng.choice(NAMES)
    per_day, days, done = rng.randint(7, 60), rng.randint(3, 40), rng.randint(10, 200)
    return Task(
        f"A book has {done + per_day * days} pages. {name} has read {done} pages and reads "
        f"{per_day} pages a day. How many more days does {name} need to finish the book?",
        days,
    )


def orchard(rng: random.Random) -> Task:
    rows, per_row = rng.randint(4, 30), rng.randint(5, 40)
    apples = rng.randint(20, 150)
    rotten = rng.randint(1, rows * per_row * apples // 10)
    return Task(
        f"An orchard has {rows} rows of {per_row} apple trees. Each tree gives {apples} "
        f"apples, and {rotten} of all the apples are rotten. How many good apples are there?",
        rows * per_row * apples - rotten,
    )


# One operation each: the easy end of a curriculum.
def gift(rng: random.Random) -> Task:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    have, more = rng.randint(100, 900), rng.randint(100, 900)
    return Task(
        f"{name} has {have} {item} and gets {more} more. How many {item} does {name} have?",
        have + more,
    )


def spend(rng: random.Random) -> Task:
    name = rng.choice(NAMES)
    price, saved = rng.randint(100, 800), rng.randint(900, 2000)
    return Task(
        f"{name} has saved ${saved} and buys a bike for ${price}. How many dollars are left?",
        saved - price,
    )


def boxes(rng: random.Random) -> Task:
    item = rng.choice(ITEMS)
    count, per = rng.randint(12, 99), rng.randint(12, 99)
    return Task(
        f"There are {count} boxes with {per} {item} in each. How many {item} in all?", count * per
    )


def teams(rng: random.Random) -> Task:
    size, count = rng.randint(3, 30), rng.randint(12, 99)
    return Task(
        f"{size * count} runners are split into teams of {size}. How many teams are there?",
        count,
    )


# Three operations.
def trip(rng: random.Random) -> Task:
    fast, hours, slow, more = randints(rng, (60, 130), (2, 9), (20, 59), (2, 9))
    return Task(
        f"A bus drives {hours} hours at {fast} km per hour, then {more} hours at {slow} km per "
        "hour. How many km does it drive?",
        fast * hours + slow * more,
    )


def market(rng: random.Random) -> Task:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    have, n, per, sold = randints(rng, (10, 400), (3, 40), (6, 60), (1, 9))
    return Task(
        f"{name} has {have} {item}, buys {n} packs of {per} {item} each, then sells {sold} "
        f"{item}. How many {item} does {name} have now?",
        have + n * per - sold,
    )


TEMPLATES: tuple[Callable[[random.Random], Task], ...] = (
    packs,
    change,
    sharing,
    journey,
    reading,
    orchard,
)
# The templates by the number of operations their answer needs.
BY_OPERATIONS: dict[int, tuple[Callable[[random.Random], Task], ...]] = {
    1: (gift, spend, boxes, teams),
    2: (packs, change, sharing, journey, reading),
    3: (orchard, trip, market),
}


def generate(rng: random.Random) -> Task:
    return rng.choice(TEMPLATES)(rng)


def _generator(
    templates: tuple[Callable[[random.Random], Task], ...],
) -> Callable[[random.Random], Task]:
    def generate_from(rng: random.Random) -> Task:
        return rng.choice(templates)(rng)

    return generate_from


PROBLEMS = TaskSet(generate, name="calculator")
# Problems of exactly 1, 2 or 3 operations; the same seed may give another question in each.
PROBLEMS_BY_OPERATIONS = {
    n: TaskSet(_generator(templates), name="calculator") for n, templates in BY_OPERATIONS.items()
}
