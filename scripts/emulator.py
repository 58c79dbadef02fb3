"""Serve moto's DynamoDB and SQS on loopback with DynamoDB requests serialized.

moto's server answers each request on its own thread, and its DynamoDB
condition checks are not atomic with the writes they guard. Real DynamoDB
evaluates a condition and applies the write as one step, so this launcher
runs every DynamoDB request under one lock. SQS requests (long polls among
them) stay concurrent, and so do Secrets Manager's: moto's dispatcher
serves every service it has on the one port, and the functions read their
secrets there.

Five more departures from plain moto, each with a switch:

Constant-cost transactions (on; EMULATOR_FAST_TRANSACTIONS=0 or
--no-fast-transactions turns them off). moto deep-copies every table a
TransactWriteItems names, to put the copies back if the transaction fails,
so a transaction costs time in proportion to the items already stored.
Here a transaction snapshots only the items its actions name (and the
length of each named table's stream) and restores those when it fails;
moto's checks, errors and cancellation reasons are its own, unchanged. The
lock above is what makes that enough: no other request can see or change
a table while a transaction runs. Unlike moto, a transaction that names its
table by ARN, or that puts two actions in one entry, is also rolled back.

ClientRequestToken (on; EMULATOR_HONOUR_REQUEST_TOKEN=0 or
--no-honour-request-token turns it off, as moto). moto ignores
TransactWriteItems' ClientRequestToken. With the switch on, the launcher
treats it as DynamoDB documents: for 10 minutes after a transaction with a token succeeded, a
request with the same token and the same other parameters gets the same
successful answer and changes nothing, and one with the same token and
other parameters fails with IdempotentParameterMismatchException. A token
whose transaction failed is not remembered: its next use runs afresh.

Queries that cost what they return (on; EMULATOR_INDEXED_QUERIES=0 or
--no-indexed-queries turns them off). moto answers every Query by listing
and sorting every item of the table, then keeping the partition asked
for. Here a table's query reads that partition, and an index's query the
items filed under its partition key, kept up to date at every write (see
install_indexed_queries); moto's own code does the rest.

Garbage collection that does not grow with the tables (on;
EMULATOR_GC_FREEZE=0 or --no-gc-freeze turns it off). Python's full
collections walk every stored item and stop every request while they do:
half a second with the 100,000 items of 50,000 charges stored. Every 1,024
DynamoDB requests the launcher freezes what is alive (see FreezeSurvivors).

Request log (off; EMULATOR_REQUEST_LOG=1 or --request-log turns it on).
werkzeug logs a line per request by default, under its logging lock and on
the threads that serve: under load that was an eighth of the emulator's
time (py-spy), spent before the next request could take the DynamoDB lock.
Errors are logged either way.

DynamoDB's size limits (always on, see install_limits). moto checks a
key's size only when it stores an item, and holds an item to its own
reckoning of 400 KB. Here every call that takes a key checks it first, as
DynamoDB does, and expressions, items and transactions are held to
DynamoDB's documented limits, with its ValidationException.

Three lookups moto repeats on every request are cached, as they cannot
change while it runs: the list of its service modules (a directory listing,
taken under the dispatcher's lock, that every request waited for), the
method names of a response class (an inspect.getmembers walk), and which
nodes each pass over an UpdateExpression's syntax tree processes (two
isinstance tests at every node it visits, see _traverse). And the deep
copy of that tree before it is validated is a pickle round trip, not
copy's generic path. Those two were most of the time of a
TransactWriteItems with a long UpdateExpression, such as a commit's.
Parsed expressions are cached too (see install_expression_caches): moto
parsed a commit's update expression twice and each condition two or three
times; and the checks of an update expression's structure run once for
each tree, names and table (see install_structure_checks_once), not at
every use.

Three costs moto's server adds to every request are dropped (see
install_lighter_requests): Flask's debug mode, a CORS handler, and an XML
rendering of every JSON error that is then thrown away.

Usage: emulator.py [--host 127.0.0.1] [--port 0] [--exit-with-stdin]
                   [--[no-]fast-transactions] [--[no-]honour-request-token]
                   [--[no-]indexed-queries] [--[no-]gc-freeze]
                   [--[no-]request-log]
Prints "READY http://HOST:PORT" on stdout once it accepts connections.
With --exit-with-stdin it exits when its standard input closes, so a test
process that started it cannot leave it behind.
"""

import argparse
import base64
import copy
import functools
import gc
import hashlib
import inspect
import io
import json
import os
import pickle
import sys
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from moto import backends
from moto.core import exceptions as core_exceptions
from moto.core import responses as core_responses
from moto.dynamodb import comparisons
from moto.dynamodb import exceptions as dynamodb_errors
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb import responses as dynamodb_responses
from moto.dynamodb.parsing import ast_nodes, expressions, validators
from moto.dynamodb.parsing.key_condition_expression import parse_expression
from moto.dynamodb.exceptions import MockValidationException, ResourceNotFoundException
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.moto_server import werkzeug_app
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.exceptions import HTTPException
from werkzeug.serving import ThreadedWSGIServer, make_server
from werkzeug.wsgi import get_input_stream

# Parallel tests open many connections at once while DynamoDB requests wait
# for the lock; werkzeug's accept queue of 128 can overflow, and a dropped
# connection makes the SDK retry a call that may already have been applied.
ThreadedWSGIServer.request_queue_size = 1024

FAST_TRANSACTIONS_ENV = "EMULATOR_FAST_TRANSACTIONS"
HONOUR_REQUEST_TOKEN_ENV = "EMULATOR_HONOUR_REQUEST_TOKEN"
REQUEST_LOG_ENV = "EMULATOR_REQUEST_LOG"
INDEXED_QUERIES_ENV = "EMULATOR_INDEXED_QUERIES"
GC_FREEZE_ENV = "EMULATOR_GC_FREEZE"


class SerializeDynamoDB:
    """WSGI middleware: one DynamoDB request at a time, everything else free."""

    def __init__(self, app):
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self._app(environ, start_response)
        with self._lock:
            # Materialize the body inside the lock so the whole request,
            # condition check and write alike, happens while it is held.
            return list(self._app(environ, start_response))


# ---- Lookups moto repeats on every request ----


def install_lookup_caches():
    """Cache moto's per-request lookups (see the module's docstring)."""
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    names = core_responses.method_names_from_class
    core_responses.method_names_from_class = functools.cache(
        lambda clazz: tuple(names(clazz))
    )
    ast_nodes.DepthFirstTraverser.traverse_node_recursively = _traverse
    ast_nodes.Node.__deepcopy__ = _copy_node
    install_expression_caches()


def install_lighter_requests():
    """Drop three costs moto's server adds to every request and error.

    py-spy on a replay (a conditional PutItem that fails and returns the
    item) found about an eighth of the emulator's time in them:
    - moto's Flask apps run in debug mode, in which Flask wraps each
      request's (empty) form data in a helper that explains missing
      uploads; debug off, errors still answer 500 with the traceback logged;
    - a CORS handler runs after every request (moto's own switch,
      MOTO_DISABLE_GLOBAL_CORS, read when moto is imported): no browser
      talks to this emulator;
    - every JSON error first renders an XML body, then replaces it with the
      JSON one: here it builds the JSON body alone, the same text.
    """
    werkzeug_app.DISABLE_GLOBAL_CORS = True

    def json_error_init(self, error_type, message, _="", **__):
        HTTPException.__init__(self)
        self.error_type = error_type
        self.message = message
        self.description = json.dumps({"__type": error_type, "message": message})
        self.content_type = "application/json"

    core_exceptions.JsonRESTError.__init__ = json_error_init


def _create_backend_app(service):
    """moto's Flask app for one service, out of debug mode (see above)."""
    app = create_backend_app(service)
    app.debug = False
    return app


# How many parsed expressions each cache keeps.
EXPRESSION_CACHE_SIZE = 1024


def install_expression_caches():
    """Parse each update and condition expression once, not at every use.

    moto parses a transaction's UpdateExpression twice and a condition
    expression up to three times (to validate the request, to check it,
    to apply the write). An update expression's syntax tree depends on its
    text alone, and moto deep-copies it before it validates or applies it,
    so one tree serves every use. A parsed condition depends on its text,
    names and values, and is only read once parsed, so it is cached under
    all three (their repr: the values hold bytes, and a miss only costs a
    parse), with the names and values the parser reports having found.
    """
    make = expressions.UpdateExpressionParser.make.__func__
    cached_make = functools.lru_cache(EXPRESSION_CACHE_SIZE)(
        lambda expression: make(expressions.UpdateExpressionParser, expression)
    )
    expressions.UpdateExpressionParser.make = classmethod(
        lambda cls, expression: cached_make(expression)
    )

    parse = comparisons.ConditionExpressionParser.parse
    parsed = OrderedDict()  # key -> (op, names found, values found)

    def cached_parse(self):
        key = (
            self.condition_expression,
            repr(self.expression_attribute_names),
            repr(self.expression_attribute_values),
        )
        hit = parsed.get(key)
        if hit is None:
            op = parse(self)
            hit = (op, list(self.expr_attr_names_found), list(self.expr_attr_values_found))
            parsed[key] = hit
            if len(parsed) > EXPRESSION_CACHE_SIZE:
                parsed.popitem(last=False)
            return op
        op, names, values = hit
        self.expr_attr_names_found.extend(names)
        self.expr_attr_values_found.extend(values)
        return op

    comparisons.ConditionExpressionParser.parse = cached_parse
    install_structure_checks_once()


# (traverser class, node class) -> (is it a Node, does the traverser process it)
_PROCESSES = {}


def _traverse(self, node, child_id=-1):
    """moto's DepthFirstTraverser.traverse_node_recursively, unchanged but
    for its two isinstance tests (the second against a tuple it rebuilt
    every time), answered once for each traverser and node class."""
    key = (type(self), type(node))
    is_node, processed = _PROCESSES.get(key) or _PROCESSES.setdefault(
        key,
        (isinstance(node, ast_nodes.Node), isinstance(node, self.nodes_to_be_processed())),
    )
    if not is_node:
        return node
    parent_node = node.parent
    if node.children is not None:
        for i, child_node in enumerate(node.children):
            self.pre_processing_of_child(node, i)
            self.traverse_node_recursively(child_node, i)
    if processed:
        node = self.process(node)
        node.parent = parent_node
        if parent_node:
            parent_node.children[child_id] = node
    return node


# The passes over an UpdateExpression's tree that read only its shape, its
# attribute names and the table's key attributes: never the item or the
# values, and none of them changes the tree.
_STRUCTURE_CHECKS = (
    validators.ActionCountValidator,
    validators.OverlappingPathsValidator,
    validators.UpdateHashRangeKeyValidator,
)


def install_structure_checks_once():
    """Run an update expression's structure checks once, not at every use.

    moto validates an UpdateExpression with ten passes over its tree, and
    three of them (_STRUCTURE_CHECKS) answer the same for the same parsed
    tree, names and table keys: they were a fifth of a commit's time. Once
    a validation of a tree has passed, later validations of that same tree
    (the parse cache hands it out again) under the same names and keys skip
    those three. A validation that fails is not remembered, so it fails
    again as moto's would.
    """
    checker = validators.UpdateExpressionValidator
    init, validate = checker.__init__, checker.validate
    passed = OrderedDict()  # (id of the tree, names, table keys) -> the tree

    def checked_init(self, expression, expression_attribute_names, expression_attribute_values, item, table):
        init(self, expression, expression_attribute_names, expression_attribute_values, item, table)
        key = (
            id(expression),
            tuple(sorted((expression_attribute_names or {}).items())),
            tuple(table.table_key_attrs),
        )
        if passed.get(key) is expression:
            self.processors = [p for p in self.processors if not isinstance(p, _STRUCTURE_CHECKS)]
        else:
            self._structure_unchecked = (key, expression)

    def checked_validate(self):
        node = validate(self)
        unchecked = getattr(self, "_structure_unchecked", None)
        if unchecked is not None:
            passed[unchecked[0]] = unchecked[1]
            if len(passed) > EXPRESSION_CACHE_SIZE:
                passed.popitem(last=False)
        return node

    checker.__init__ = checked_init
    checker.validate = checked_validate


def _copy_node(node, memo):
    """copy.deepcopy of a syntax-tree node, as a pickle round trip.

    Every UpdateExpression is deep-copied before it is validated. deepcopy
    and pickle both rebuild a plain object from its class and its __dict__
    (__reduce_ex__), and both copy what the node reaches (its parent, and
    so the whole tree) once each; pickle does it in C. A commit's update
    expression: 100 us, against 313 us by copy's generic path and 120 us by
    a copy of nodes and lists written in Python.
    """
    new = pickle.loads(pickle.dumps(node, pickle.HIGHEST_PROTOCOL))
    memo[id(node)] = new
    return new


# ---- DynamoDB's size limits ----

# DynamoDB's documented limits (developer guide, "Constraints"), in bytes
# but for the count of a transaction's actions.
HASH_KEY_MAX = 2048
RANGE_KEY_MAX = 1024
ITEM_MAX = 400 * 1024
EXPRESSION_MAX = 4096
TRANSACTION_MAX = 4 * 1024 * 1024
TRANSACTION_ACTIONS_MAX = 100

# The expression parameters a request, or a part of one, can carry.
_EXPRESSIONS = (
    "KeyConditionExpression",
    "ConditionExpression",
    "UpdateExpression",
    "FilterExpression",
    "ProjectionExpression",
)

# DynamoDB's answer to a transaction over TRANSACTION_MAX, as reported by
# the emulators that captured it (the developer guide does not quote it).
_TRANSACTION_TOO_LARGE = (
    "Collection size of items exceeded, which can also be caused by the "
    "aggregate size of the items in the transaction exceeding the 4MB limit"
)


def install_limits():
    """Refuse what DynamoDB refuses for its size limits, where moto does not.

    moto checks a key's size only when it stores an item, so a GetItem, a
    DeleteItem, a Query or a ConditionCheck with an over-long key ran, and
    an UpdateItem or a transaction's Put with one answered its condition
    first. Here every action that takes a key checks it first, with
    DynamoDB's ValidationException (moto's own exception classes and
    messages). Each expression is held to 4 KB, a transaction to 4 MB and
    TransactGetItems to 100 actions (moto: 25). An item is held to
    DynamoDB's 400 KB by DynamoDB's sizing rules (_size), where moto held
    it to 405,000 bytes, counted a number by its digits and a list or map
    without its overhead.

    The checks read only the request moto already parsed: 1 to 6 us for a
    GetItem, a Query or a commit's transaction. A transaction's items, and
    a batch's, are sized only when the request is over the limit: its JSON
    is never shorter than DynamoDB's size of what it holds. An item's size
    is checked where moto checked it, as each of its attributes is set. An
    UpdateItem refused for its item's size changes nothing, as in DynamoDB
    (_undone_if_too_large).
    """
    handler = dynamodb_responses.DynamoHandler
    for action, check in _LIMIT_CHECKS.items():
        setattr(handler, action, _checked(getattr(handler, action), check))
    backend = dynamodb_models.DynamoDBBackend
    backend.update_item = _undone_if_too_large(backend.update_item)
    dynamodb_responses.TRANSACTION_MAX_ITEMS = TRANSACTION_ACTIONS_MAX
    dynamo_type.LimitedSizeDict.__setitem__ = _limited_setitem


def _checked(action, check):
    """action, a DynamoHandler method, run after check(handler) passed.

    Its errors are raised inside moto's dispatch, which answers them as it
    answers its own.
    """

    @functools.wraps(action)
    def checked(self):
        check(self)
        return action(self)

    return checked


def _undone_if_too_large(update_item):
    """moto's DynamoDBBackend.update_item, all or nothing as in DynamoDB.

    moto applies an update's actions to the stored item one at a time, so
    an update refused for the item's size left its earlier actions applied
    (and an item it created, with its stream record). Here the item and
    its stream are put back as they were (_NamedItems: a deep copy of the
    one item, about 30 us for a record of ten attributes on a loaded
    machine, where the whole UpdateItem took 2 ms).
    """

    @functools.wraps(update_item)
    def update_or_undo(self, table_name, key, *args, **kwargs):
        named = _NamedItems(self, [{"Update": {"TableName": table_name, "Key": key}}])
        try:
            return update_item(self, table_name, key, *args, **kwargs)
        except dynamodb_errors.ItemSizeToUpdateTooLarge:
            named.restore()
            raise

    return update_or_undo


def _check_key_part(handler):
    """GetItem, DeleteItem, UpdateItem: expressions and Key."""
    _check_expressions(handler.body)
    _check_key(handler, handler.body.get("TableName"), handler.body.get("Key"))


def _check_put(handler):
    """PutItem: expressions and the key in Item."""
    _check_expressions(handler.body)
    _check_key(handler, handler.body.get("TableName"), handler.body.get("Item"))


def _check_scan(handler):
    """Scan: expressions."""
    _check_expressions(handler.body)


def _check_query(handler):
    """Query: expressions and the key values KeyConditionExpression names."""
    body = handler.body
    _check_expressions(body)
    expression = body.get("KeyConditionExpression")
    values = body.get("ExpressionAttributeValues") or {}
    # Parsing the key condition is most of a query's check: skip it when no
    # value could be over either limit.
    if not expression or all(_key_size(v) <= RANGE_KEY_MAX for v in values.values()):
        return
    try:
        hashes, ranges, _ = parse_expression(
            key_condition_expression=expression,
            expression_attribute_names=body.get("ExpressionAttributeNames") or {},
            expression_attribute_values=values,
            schema=handler.dynamodb_backend.get_schema(
                table_name=body.get("TableName"), index_name=body.get("IndexName")
            ),
        )
    except Exception:  # moto answers a malformed key condition its own way
        return
    for _, value in hashes:
        if _key_size(value) > HASH_KEY_MAX:
            raise dynamodb_errors.HashKeyTooLong()
    for _, _, values in ranges:
        if any(_key_size(value) > RANGE_KEY_MAX for value in values):
            raise dynamodb_errors.RangeKeyTooLong()


def _check_batch_get(handler):
    """BatchGetItem: each table's expressions and keys."""
    for table, request in (handler.body.get("RequestItems") or {}).items():
        _check_expressions(request)
        for key in (request.get("Keys") if isinstance(request, dict) else None) or ():
            _check_key(handler, table, key)


def _check_batch_write(handler):
    """BatchWriteItem: the key of each put and delete, and the size of each
    put's item, which moto checks only as it stores it, after the puts
    before it were stored."""
    length = _request_length(handler)
    for table, requests in (handler.body.get("RequestItems") or {}).items():
        for request in requests or ():
            for kind, attrs in (("PutRequest", "Item"), ("DeleteRequest", "Key")):
                part = request.get(kind) if isinstance(request, dict) else None
                if isinstance(part, dict):
                    _check_key(handler, table, part.get(attrs))
            put = request.get("PutRequest") if isinstance(request, dict) else None
            if (length is None or length > ITEM_MAX) and isinstance(put, dict):
                item = put.get("Item")
                if isinstance(item, dict) and sum(_attribute_size(k, v) for k, v in item.items()) > ITEM_MAX:
                    raise dynamodb_errors.ItemSizeTooLarge()


def _check_transact_get(handler):
    """TransactGetItems: each Get's expressions and key."""
    for entry in handler.body.get("TransactItems") or ():
        get = (entry.get("Get") if isinstance(entry, dict) else None) or {}
        _check_expressions(get)
        _check_key(handler, get.get("TableName"), get.get("Key"))


def _check_transact_write(handler):
    """TransactWriteItems: each action's expressions and key, then 4 MB.

    What DynamoDB counts towards the 4 MB is not documented beyond "the
    aggregate size of the items": here a Put counts its item, and an
    Update, Delete or ConditionCheck its key.
    """
    actions = [
        (action, op)
        for entry in handler.body.get("TransactItems") or ()
        if isinstance(entry, dict)
        for action, op in entry.items()
        if isinstance(op, dict)
    ]
    for action, op in actions:
        _check_expressions(op)
        _check_key(handler, op.get("TableName"), op.get("Item" if action == "Put" else "Key"))
    length = _request_length(handler)
    if length is not None and length <= TRANSACTION_MAX:
        return
    total = 0
    for action, op in actions:
        attrs = op.get("Item" if action == "Put" else "Key")
        if isinstance(attrs, dict):
            total += sum(_attribute_size(name, value) for name, value in attrs.items())
    if total > TRANSACTION_MAX:
        raise dynamodb_errors.MockValidationException(_TRANSACTION_TOO_LARGE)


_LIMIT_CHECKS = {
    "get_item": _check_key_part,
    "delete_item": _check_key_part,
    "update_item": _check_key_part,
    "put_item": _check_put,
    "query": _check_query,
    "scan": _check_scan,
    "batch_get_item": _check_batch_get,
    "batch_write_item": _check_batch_write,
    "transact_get_items": _check_transact_get,
    "transact_write_items": _check_transact_write,
}


def _request_length(handler):
    """The request body's length in bytes, or None if it did not say."""
    try:
        return int(handler.headers.get("Content-Length"))
    except (TypeError, ValueError):
        return None


def _check_expressions(part):
    """Refuse an expression over EXPRESSION_MAX bytes, as DynamoDB does."""
    if not isinstance(part, dict):
        return
    for name in _EXPRESSIONS:
        expression = part.get(name)
        # A character is at most 4 bytes: most expressions need no encoding.
        if isinstance(expression, str) and len(expression) * 4 > EXPRESSION_MAX:
            size = len(expression.encode("utf-8", "surrogatepass"))
            if size > EXPRESSION_MAX:
                raise dynamodb_errors.MockValidationException(
                    f"Invalid {name}: Expression size has exceeded the maximum "
                    f"allowed size; expression size: {size}"
                )


def _check_key(handler, table_name, attrs):
    """Refuse attrs if its key attributes for table_name are over-long."""
    if not isinstance(attrs, dict):
        return
    try:
        table = handler.dynamodb_backend.get_table(table_name)
    except (ResourceNotFoundException, KeyError, TypeError, AttributeError):
        return  # moto answers it
    if _key_size(attrs.get(table.hash_key_attr)) > HASH_KEY_MAX:
        raise dynamodb_errors.HashKeyTooLong()
    if table.range_key_attr is not None and _key_size(attrs.get(table.range_key_attr)) > RANGE_KEY_MAX:
        raise dynamodb_errors.RangeKeyTooLong()


def _key_size(value):
    """The size of a key value in a request: a string's or a binary's bytes."""
    if not isinstance(value, dict):
        return 0
    if "S" in value:
        return _text_size(value["S"])
    if "B" in value:
        return _binary_size(value["B"])
    return 0  # a number: 38 digits at most, far under either limit


def _text_size(text):
    """A string's size: its UTF-8 bytes."""
    if not isinstance(text, str):
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _binary_size(data):
    """A binary's size: its raw bytes, parsed from the request or, in a
    value moto built from base64 text, decoded."""
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data))
    except ValueError:
        return len(data)


def _number_size(number):
    """A number's size, as DynamoDB documents it: one byte per two
    significant digits, plus one."""
    digits = str(number).lstrip("+-").lower().split("e")[0].replace(".", "")
    significant = len(digits.strip("0")) or 1
    return (significant + 1) // 2 + 1


def _attribute_size(name, value):
    """The size of an attribute, its name included, by DynamoDB's rules.

    value is a request's {"S": ...} form or moto's DynamoType.
    """
    return _text_size(name) + _size(value)


def _size(value):
    """The size of a value by DynamoDB's rules (CapacityUnitCalculations):
    strings by their UTF-8 bytes, binaries by their raw bytes, numbers by
    their significant digits, 1 byte for a boolean or null, and 3 bytes
    for a list or map plus 1 for each element."""
    if isinstance(value, DynamoType):
        kind, data = value.type, value.value
    elif isinstance(value, dict) and len(value) == 1:
        ((kind, data),) = value.items()
    else:
        return _text_size(str(value))
    if kind == "S":
        return _text_size(data)
    if kind == "B":
        return _binary_size(data)
    if kind == "N":
        return _number_size(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_text_size(v) for v in data)
    if kind == "NS":
        return sum(_number_size(v) for v in data)
    if kind == "BS":
        return sum(_binary_size(v) for v in data)
    if kind == "L":
        return 3 + sum(1 + _size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + _attribute_size(k, v) for k, v in data.items())
    return _text_size(str(data))


def _limited_setitem(self, name, value):
    """moto's LimitedSizeDict.__setitem__ (an item's attributes), held to
    DynamoDB's ITEM_MAX by DynamoDB's sizing instead of moto's."""
    size = _attribute_size(name, value) + sum(
        _attribute_size(k, v) for k, v in self.items() if k != name
    )
    if size > ITEM_MAX:
        raise dynamodb_errors.ItemSizeTooLarge()
    dict.__setitem__(self, name, value)


# ---- Constant-cost transactions ----


class _TablesByReference:
    """The copy module as moto.dynamodb.models sees it with fast transactions.

    moto's transact_write_items deep-copies each table it names before it
    starts and puts the copies back if the transaction fails. Through this
    stand-in a table's copy is the table itself, so putting it back changes
    nothing and costs nothing; _NamedItems restores what the transaction
    changed. Any other object is deep-copied as before.
    """

    def deepcopy(self, obj, memo=None):
        """Return a Table itself, and a deep copy of anything else."""
        if isinstance(obj, Table):
            return obj
        return copy.deepcopy(obj, memo)

    def __getattr__(self, name):
        return getattr(copy, name)


@dataclass
class _SavedItem:
    """One item a transaction names, as it was before the transaction."""

    table: Table
    hash_key: DynamoType
    range_key: DynamoType | None
    item: object  # a deep copy of moto's Item, or None if it was absent
    had_bucket: bool  # range tables: whether items[hash_key] existed


class _NamedItems:
    """A snapshot of the items a TransactWriteItems names, and their streams.

    restore() puts back exactly those items (absent ones are removed again)
    and cuts each named table's stream back to the records it had, which is
    all a transaction can change.
    """

    def __init__(self, backend, transact_items):
        self._items = {}
        self._streams = {}
        for entry in transact_items:
            for action, op in entry.items():
                self._save(backend, action, op)

    def _save(self, backend, action, op):
        try:
            table = backend.get_table(op["TableName"])
        except (KeyError, TypeError, ResourceNotFoundException):
            return  # moto reports it; nothing of this action can be applied
        key = self._key(table, op.get("Item" if action == "Put" else "Key"))
        if key is None:
            return
        slot = (id(table),) + key
        if slot in self._items:
            return  # a duplicate: moto refuses the transaction
        hash_key, range_key = key
        if range_key is None:
            item, had_bucket = table.items.get(hash_key), True
        else:
            bucket = table.items.get(hash_key)
            item, had_bucket = (bucket or {}).get(range_key), bucket is not None
        self._items[slot] = _SavedItem(
            table, hash_key, range_key, copy.deepcopy(item), had_bucket
        )
        shard = table.stream_shard
        if shard is not None and id(table) not in self._streams:
            self._streams[id(table)] = (shard, shard.items, len(shard.items))

    @staticmethod
    def _key(table, attrs):
        """The (hash, range) key attrs name in table, or None if they do not."""
        names = [table.hash_key_attr, table.range_key_attr]
        if not isinstance(attrs, dict) or any(
            name is not None and name not in attrs for name in names
        ):
            return None
        try:
            return tuple(None if n is None else DynamoType(attrs[n]) for n in names)
        except (AttributeError, IndexError, TypeError):
            return None  # a malformed value: moto rejects the action

    def restore(self):
        """Put every named item and stream back as it was."""
        for saved in self._items.values():
            items = saved.table.items
            if saved.range_key is None:
                if saved.item is None:
                    items.pop(saved.hash_key, None)
                else:
                    items[saved.hash_key] = saved.item
            elif saved.item is not None:
                items[saved.hash_key][saved.range_key] = saved.item
            elif saved.hash_key in items:
                items[saved.hash_key].pop(saved.range_key, None)
                if not saved.had_bucket and not items[saved.hash_key]:
                    del items[saved.hash_key]
        for shard, records, count in self._streams.values():
            del records[count:]
            shard.items = records


def install_fast_transactions():
    """Make moto's TransactWriteItems snapshot named items, not whole tables."""
    backend = dynamodb_models.DynamoDBBackend
    original = backend.transact_write_items

    @functools.wraps(original)
    def transact_write_items(self, transact_items):
        snapshot = _NamedItems(self, transact_items)
        try:
            return original(self, transact_items)
        except Exception:
            snapshot.restore()
            raise

    dynamodb_models.copy = _TablesByReference()
    backend.transact_write_items = transact_write_items


# ---- Queries that cost what they return ----


# The attribute on a moto Table under which its index partitions are kept.
_INDEXES = "_emulator_indexes"


class _IndexPartitions:
    """One secondary index's items, by the values of its partition key.

    An item is filed when it has every key attribute of the index, as
    DynamoDB files it in a sparse index; moto's own query still checks
    each candidate, so filing one it would skip changes nothing.
    """

    def __init__(self, hash_attrs, key_attrs):
        self.hash_attrs = hash_attrs
        self.key_attrs = key_attrs
        self.by_hash = {}  # partition key values -> {table key -> Item}
        self.filed = {}  # table key -> partition key values

    def file(self, key, item):
        """Move the item at table key key (None: gone) to its partition."""
        old = self.filed.pop(key, None)
        if old is not None:
            partition = self.by_hash[old]
            del partition[key]
            if not partition:
                del self.by_hash[old]
        if item is None or any(a not in item.attrs for a in self.key_attrs):
            return
        values = tuple(item.attrs[a] for a in self.hash_attrs)
        self.by_hash.setdefault(values, {})[key] = item
        self.filed[key] = values


def _table_key(table, item):
    return (item.hash_key, item.range_key if table.range_key_attr else None)


def _partitions(table, index):
    """The index's partitions, built from the whole table on first use.

    They are kept under the index's name and key schema, so an index
    created again with another schema is built afresh.
    """
    indexes = table.__dict__.setdefault(_INDEXES, {})
    schema = tuple((k["AttributeName"], k["KeyType"]) for k in index.schema)
    parts = indexes.get((index.name, schema))
    if parts is None:
        hash_attrs = tuple(a for a, kind in schema if kind == "HASH")
        parts = _IndexPartitions(hash_attrs, tuple(a for a, _ in schema))
        for item in _every_item(table):
            parts.file(_table_key(table, item), item)
        indexes[(index.name, schema)] = parts
    return parts


def _every_item(table):
    for bucket in table.items.values():
        if table.range_key_attr:
            yield from bucket.values()
        else:
            yield bucket


def _refile(table, hash_key, range_key):
    """File the item now at (hash_key, range_key) anew in every built index."""
    indexes = table.__dict__.get(_INDEXES)
    if not indexes:
        return
    key = (hash_key, range_key if table.range_key_attr else None)
    try:
        item = table.get_item(*key)
    except MockValidationException:  # no sort key: it names no item
        item = None
    for parts in indexes.values():
        parts.file(key, item)


def _query_candidates(table, hash_key, index_name, hash_key_conditions):
    """The items a query can return, in all_items' order; None: all of them.

    A query of the table reads one partition key's items; a query of an
    index names every attribute of the index's partition key, and reads
    that partition of the index.
    """
    if not index_name:
        if hash_key is None:
            return None
        bucket = table.items.get(hash_key)
        if bucket is None:
            return []
        found = list(bucket.values()) if table.range_key_attr else [bucket]
    else:
        index = {i.name: i for i in table.all_indexes()}.get(index_name)
        if index is None or not hash_key_conditions:
            return None  # moto answers with its own error or its own scan
        parts = _partitions(table, index)
        given = dict(hash_key_conditions)
        if set(given) != set(parts.hash_attrs):
            return None
        values = tuple(given[a] for a in parts.hash_attrs)
        found = list(parts.by_hash.get(values, {}).values())
    return sorted(found, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)


def install_indexed_queries():
    """Make a Query read the partition it names, not every item of the table.

    moto's Table.query walks all_items(), which lists and sorts the whole
    table, then keeps the items of the partition asked for. The sweeper
    queries the sparse stuck-lease index of every shard every 5 seconds,
    under the one DynamoDB lock, so the stack slowed down as its tables
    grew. Here each table keeps its indexes' partitions, filed again after
    every write that can change an item (Table.put_item and delete_item,
    and UpdateItem and TransactWriteItems, which change items in place or
    put some back); a query hands moto that partition as all_items(), in
    all_items' order, and moto does the rest (key conditions, sorting,
    paging, filters, projection) as before.
    """
    put_item, delete_item, query = Table.put_item, Table.delete_item, Table.query

    @functools.wraps(put_item)
    def indexed_put_item(self, item_attrs, *args, **kwargs):
        try:
            return put_item(self, item_attrs, *args, **kwargs)
        finally:
            key = _NamedItems._key(self, item_attrs)
            if key is not None:
                _refile(self, *key)

    @functools.wraps(delete_item)
    def indexed_delete_item(self, hash_key, range_key):
        try:
            return delete_item(self, hash_key, range_key)
        finally:
            _refile(self, hash_key, range_key)

    signature = inspect.signature(query)

    @functools.wraps(query)
    def indexed_query(self, *args, **kwargs):
        named = signature.bind(self, *args, **kwargs).arguments
        found = _query_candidates(
            self, named["hash_key"], named.get("index_name"), named.get("hash_key_conditions")
        )
        if found is None:
            return query(self, *args, **kwargs)
        self.all_items = lambda: found  # the lock keeps any other request out
        try:
            return query(self, *args, **kwargs)
        finally:
            del self.all_items

    backend = dynamodb_models.DynamoDBBackend
    update_item, transact = backend.update_item, backend.transact_write_items

    @functools.wraps(update_item)
    def indexed_update_item(self, table_name, key, *args, **kwargs):
        try:
            return update_item(self, table_name, key, *args, **kwargs)
        finally:
            _refile_named(self, table_name, key)

    @functools.wraps(transact)
    def indexed_transact(self, transact_items):
        try:
            return transact(self, transact_items)
        finally:
            for entry in transact_items if isinstance(transact_items, list) else ():
                for action, op in entry.items() if isinstance(entry, dict) else ():
                    if isinstance(op, dict):
                        _refile_named(self, op.get("TableName"), op.get("Item" if action == "Put" else "Key"))

    Table.put_item, Table.delete_item, Table.query = indexed_put_item, indexed_delete_item, indexed_query
    backend.update_item, backend.transact_write_items = indexed_update_item, indexed_transact


def _refile_named(backend, table_name, attrs):
    """_refile the item attrs names in table_name, if both exist."""
    try:
        table = backend.get_table(table_name)
    except (KeyError, TypeError, ResourceNotFoundException):
        return
    key = _NamedItems._key(table, attrs)
    if key is not None:
        _refile(table, *key)


# ---- Garbage collection that does not grow with the tables ----


class FreezeSurvivors:
    """WSGI middleware: every FREEZE_EVERY DynamoDB requests, gc.freeze().

    CPython's full garbage collection walks every tracked object, and every
    item moto keeps is dozens of them; it stops every thread while it runs.
    With the 100,000 items of 50,000 charges stored one pause took half a
    second, so the stack's p99 grew with its tables. gc.freeze() moves the objects alive
    now out of the collector's sight: reference counting still frees them
    once unused, but a cycle among them would never be. It runs under
    SerializeDynamoDB's lock, between two requests, when only the stored
    items, moto's caches and other threads' SQS requests are alive.
    """

    FREEZE_EVERY = 1024

    def __init__(self, app):
        self._app = app
        self._requests = 0
        gc.freeze()  # what moto's import and setup made

    def __call__(self, environ, start_response):
        """Answer the request; freeze after every FREEZE_EVERY-th of DynamoDB's."""
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            return self._app(environ, start_response)
        body = list(self._app(environ, start_response))
        self._requests += 1
        if self._requests % self.FREEZE_EVERY == 0:
            gc.freeze()
        return body


# ---- ClientRequestToken ----


@dataclass
class _Answered:
    """A successful transaction's answer, kept for its token's window."""

    expires: float  # time.monotonic()
    digest: str  # of the request's parameters other than the token
    status: str
    headers: list
    body: bytes


class HonourRequestTokens:
    """WSGI middleware: TransactWriteItems' ClientRequestToken, as DynamoDB.

    It must run under SerializeDynamoDB's lock: it reads and records tokens
    without a lock of its own, and a request must not slip in between a
    transaction and the recording of its token.
    """

    TARGET = "DynamoDB_20120810.TransactWriteItems"
    WINDOW = 600.0  # seconds a token is remembered after its transaction
    MISMATCH = "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException"

    def __init__(self, app):
        self._app = app
        self._answered = OrderedDict()  # token -> _Answered, oldest first

    def __call__(self, environ, start_response):
        """Replay, refuse or run a TransactWriteItems; pass anything else on."""
        if environ.get("HTTP_X_AMZ_TARGET") != self.TARGET:
            return self._app(environ, start_response)
        body = get_input_stream(environ).read()
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        try:
            params = json.loads(body)
            token = params.pop("ClientRequestToken", None)
        except (ValueError, AttributeError):
            token = None  # not a JSON object: moto answers it
        if token is None:
            return self._app(environ, start_response)

        digest = hashlib.sha256(
            json.dumps(params, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        now = time.monotonic()
        self._forget_before(now)
        answered = self._answered.get(token)
        if answered is not None:
            if answered.digest != digest:
                return self._mismatch(start_response)
            start_response(answered.status, list(answered.headers))
            return [answered.body]

        sent = {}

        def keep_status(status, headers, exc_info=None):
            sent["status"], sent["headers"] = status, list(headers)
            return start_response(status, headers, exc_info)

        response = b"".join(self._app(environ, keep_status))
        if sent["status"].startswith("200"):
            self._answered[token] = _Answered(
                time.monotonic() + self.WINDOW,
                digest,
                sent["status"],
                sent["headers"],
                response,
            )
        return [response]

    def _forget_before(self, now):
        """Drop the tokens whose window ended (they are oldest first)."""
        while self._answered:
            token = next(iter(self._answered))
            if self._answered[token].expires > now:
                return
            del self._answered[token]

    def _mismatch(self, start_response):
        """Answer IdempotentParameterMismatchException, as DynamoDB would."""
        body = json.dumps(
            {
                "__type": self.MISMATCH,
                "message": "ClientRequestToken was used by an earlier "
                "TransactWriteItems request with other parameters",
            }
        ).encode()
        start_response(
            "400 Bad Request",
            [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("Content-Length", str(len(body))),
                # The SDK checks DynamoDB answers against it, as moto's carry it.
                ("x-amz-crc32", str(zlib.crc32(body))),
            ],
        )
        return [body]


class _QuietRequests(MotoRequestHandler):
    """moto's request handler without the line per request; errors still log."""

    def log_request(self, code="-", size="-"):
        """Log nothing: the request log is off."""


def _env_switch(name, default):
    """The boolean environment variable name: 0/false/no/off or 1/true/yes/on."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    sys.exit(f"emulator.py: {name}={value!r}: want 0 or 1")


def _exit_on_eof() -> None:
    sys.stdin.read()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--exit-with-stdin", action="store_true")
    parser.add_argument(
        "--fast-transactions",
        action=argparse.BooleanOptionalAction,
        default=_env_switch(FAST_TRANSACTIONS_ENV, True),
        help="snapshot named items, not whole tables "
        f"(default: ${FAST_TRANSACTIONS_ENV}, else on)",
    )
    parser.add_argument(
        "--honour-request-token",
        action=argparse.BooleanOptionalAction,
        default=_env_switch(HONOUR_REQUEST_TOKEN_ENV, True),
        help="honour TransactWriteItems' ClientRequestToken as DynamoDB does "
        f"(default: ${HONOUR_REQUEST_TOKEN_ENV}, else on)",
    )
    parser.add_argument(
        "--indexed-queries",
        action=argparse.BooleanOptionalAction,
        default=_env_switch(INDEXED_QUERIES_ENV, True),
        help="a Query reads the partition it names, not the whole table "
        f"(default: ${INDEXED_QUERIES_ENV}, else on)",
    )
    parser.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=_env_switch(GC_FREEZE_ENV, True),
        help="keep what survives out of full garbage collections "
        f"(default: ${GC_FREEZE_ENV}, else on)",
    )
    parser.add_argument(
        "--request-log",
        action=argparse.BooleanOptionalAction,
        default=_env_switch(REQUEST_LOG_ENV, False),
        help=f"log a line per request (default: ${REQUEST_LOG_ENV}, else off)",
    )
    args = parser.parse_args()

    install_lookup_caches()
    install_lighter_requests()
    install_limits()
    if args.fast_transactions:
        install_fast_transactions()
    if args.indexed_queries:
        install_indexed_queries()  # after them: it files what they put back
    app = DomainDispatcherApplication(_create_backend_app)
    if args.honour_request_token:
        app = HonourRequestTokens(app)
    if args.gc_freeze:
        app = FreezeSurvivors(app)  # inside the lock, as the tokens
    app = SerializeDynamoDB(app)
    server = make_server(
        args.host,
        args.port,
        app,
        threaded=True,
        request_handler=MotoRequestHandler if args.request_log else _QuietRequests,
    )
    host, port = server.server_address[:2]
    print(f"READY http://{host}:{port}", flush=True)
    if args.exit_with_stdin:
        threading.Thread(target=_exit_on_eof, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
