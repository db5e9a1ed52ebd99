"""Which offloaded results a grant names, with no CDK import (the library's tests load it too).

The library names each object `<folder><url-quoted idempotency key>/<owner>`, and every
idempotency key of a function starts with `<key_prefix>#` (`#` quoted as `%23`). A grant on
`<folder><quoted key_prefix>%23*` therefore names that function's objects only, as
`dynamodb:LeadingKeys = <key_prefix>#*` names its items: the grant of `orders`
(`idempotency/orders/orders%23*`) does not reach the objects of `orders/eu`, which sit under
`idempotency/orders/eu/` inside its folder. Nothing moves: objects keep the names they were
written with, before this rule and after it.
"""

from __future__ import annotations

from urllib.parse import quote


def granted_objects(folder: str, key_prefix: str) -> str:
    """Return the object-key pattern of `key_prefix`'s offloaded results under `folder`.

    `key_prefix` must hold none of `*`, `?`, `#`, `%`: the pattern is exact only then.
    """
    return f"{folder}{quote(key_prefix + '#', safe='')}*"
