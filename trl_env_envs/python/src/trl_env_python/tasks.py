"""Number problems that are easy to solve with a short program and tedious by hand.

Generated from a seeded ``Random`` (see :class:`trl_env.tools.TaskSet`), every answer an exact
integer computed here with plain, obviously correct code.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from trl_env.tools import Task, TaskSet


def _primes_below(n: int) -> list[int]:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"[:n]
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n, i)))
    return [i for i in range(n) if sieve[i]]


def prime_sum(rng: random.Random) -> Task:
    n = rng.randint(1_000, 50_000)
    return Task(f"What is the sum of all prime numbers below {n}?", sum(_primes_below(n)))


def fibonacci_mod(rng: random.Random) -> Task:
    k, m = rng.randint(50, 2_000), rng.choice((997, 1_000, 9_973, 10_007, 65_536))
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return Task(
        f"Let F(1) = F(2) = 1 and F(n) = F(n-1) + F(n-2). What is F({k}) modulo {m}?", a % m
    )


def divisible_count(rng: random.Random) -> Task:
    n, a, b = rng.randint(1_000, 1_000_000), rng.randint(3, 19), rng.randint(20, 97)
    c = rng.choice((2, 5, 10))
    return Task(
        f"How many integers from 1 to {n} are divisible by {a} or by {b}, but not by {c}?",
        count_divisible(n, a, b, c),
    )


def count_divisible(n: int, a: int, b: int, c: int) -> int:
    """Inclusion-exclusion; the tests check it against counting one by one."""

    def multiples(d: int) -> int:  # multiples of d up to n that c does not divide
        return n // d - n // math.lcm(d, c)

    return multiples(a) + multiples(b) - multiples(math.lcm(a, b))


def digit_sum_power(rng: random.Random) -> Task:
    base, exp = rng.randint(2, 99), rng.randint(50, 400)
    return Task(
        f"What is the sum of the decimal digits of {base} to the power {exp}?",
        sum(int(d) for d in str(base**exp)),
    )


def collatz_steps(rng: random.Random) -> Task:
    n = rng.randint(1_000, 10**7)
    steps, x = 0, n
    while x != 1:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        steps += 1
    return Task(
        f"Starting from {n}, repeatedly halve even numbers and replace odd numbers x by 3x + 1. "
        "How many steps does it take to reach 1?",
        steps,
    )


def divisor_count(rng: random.Random) -> Task:
    n = rng.randint(10_000, 10**9)
    return Task(f"How many positive divisors does {n} have?", count_divisors(n))


def count_divisors(n: int) -> int:
    """Product of (exponent + 1) over the prime factorization, by trial division."""
    count, p = 1, 2
    while p * p <= n:
        exponent = 0
        while n % p == 0:
            n //= p
            exponent += 1
        count *= exponent + 1
        p += 1 if p == 2 else 2
    return count * (2 if n > 1 else 1)


TEMPLATES: tuple[Callable[[random.Random], Task], ...] = (
    prime_sum,
    fibonacci_mod,
    divisible_count,
    digit_sum_power,
    collatz_steps,
    divisor_count,
)


def generate(rng: random.Random) -> Task:
    return rng.choice(TEMPLATES)(rng)


PROBLEMS = TaskSet(generate, name="python")
