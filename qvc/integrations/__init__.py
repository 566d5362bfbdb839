"""Adapters that plug qvc repositories into agent frameworks.

Each adapter lives in its own module and is imported only on demand, so ``import qvc`` never
imports a framework: ``from qvc.integrations.langgraph import QvcSaver`` needs the
``langgraph`` extra (``pip install "qvc[langgraph]"``).
"""
