"""Remote control: a signed document that disables domains of the local pools.

An operator (or the monitoring agent) publishes, at a URL independent of the pools
it controls, a small signed *control document*: "in pool ``api``, domain
``https://api.example.com`` is disabled". Clients poll it (``ControlPoller``) and
apply it to their transport (``transport.apply_control(doc)``).

One job per module:

=============== ==================================================================
``_document``   the rules: what a document says, its bounds, its validity window,
                and whether it fits the local pools (``ControlDocument``,
                ``check_disabled``, ``Quorum``: which locations agreed)
``_jws``        the wire form: JWS compact serialization, EdDSA or HS256, verified
                with an algorithm allow-list (``sign_document``, ``verify_document``)
``_keys``       keys and the one key file format, a JWK (``ControlKey``,
                ``load_key``, ``generate_key``)
``_poller``     fetching and applying, sync and async (``ControlPoller``)
``_json``,      strict JSON and strict base64url, shared by the above
``_base64``
=============== ==================================================================

Everything refused is a ``ControlError`` (a ``ValueError``) and changes nothing.
Its ``reason``, in the order the rules are checked:

============== ==============================================================
reason         when
============== ==============================================================
too_large      more than ``MAX_DOCUMENT_BYTES`` bytes
malformed      not a JWS compact serialization: whitespace, not three parts,
               bad or padded base64url, header or payload not strict JSON
missing_field  a member of the header or payload is absent
extra_field    a member nobody defined is present (``crit``, ``jku``, ...)
wrong_type     a member has the wrong JSON type (a boolean or fraction where
               an integer belongs, a domain that is not a base URL ...)
out_of_range   a number outside its bounds; ``exp`` not after ``iat``
unknown_alg    ``alg`` is not ``EdDSA``/``Ed25519``/``HS256`` (e.g. ``none``)
wrong_typ      ``typ`` is not ``failover-control+jwt``: another kind of JWT
no_key         no configured key verifies that ``alg`` (and ``kid``)
bad_signature  the signature does not verify
future         ``iat`` is later than now plus ``max_skew``
expired        ``exp`` is now or in the past
stale_version  ``version`` is not greater than the version in force
unknown_pool   a pool the client does not have
unknown_domain a domain that is not in that pool
all_disabled   every domain of a pool would be disabled
============== ==============================================================

Header checks come before the signature, the payload is read only after it. The
last four rules need the local pools and the version in force: ``doc.check``, which
the transport calls before applying anything. The last three are
``check_disabled(pools, disabled)``, which a writer of documents (the agent) calls on
what it is about to sign, so the rule "never every domain of a pool" has one home.
"""

from __future__ import annotations

from .._exceptions import ControlError
from ._document import MAX_LOCATIONS, MAX_TIME, MAX_VERSION, ControlDocument, Quorum, check_disabled
from ._jws import CONTENT_TYPE, MAX_DOCUMENT_BYTES, TYP, sign_document, verify_document
from ._keys import ControlKey, generate_key, load_key, parse_key, save_key
from ._poller import ControlPoller, ControlTarget

__all__ = [
    "CONTENT_TYPE",
    "MAX_DOCUMENT_BYTES",
    "MAX_LOCATIONS",
    "MAX_TIME",
    "MAX_VERSION",
    "TYP",
    "ControlDocument",
    "ControlError",
    "ControlKey",
    "ControlPoller",
    "ControlTarget",
    "Quorum",
    "check_disabled",
    "generate_key",
    "load_key",
    "parse_key",
    "save_key",
    "sign_document",
    "verify_document",
]
