"""docs/check_examples.py: every python block of a page runs, and prints what the page shows."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("markdown_it", reason="markdown-it-py: pip install -e '.[dev]'")
_spec = importlib.util.spec_from_file_location("docs_check", ROOT / "docs" / "check_examples.py")
check_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_examples)

PAGE = """# A page

```python
x = 2
print(x + 1)
```

```text
3
```

1. A step, its code inside the list item:

    ```python
    print(x * 10)
    ```

    ```text
    21
    ```

~~~python
print("tilde")
~~~
"""


# A python block inside a list item (or fenced with ~~~) was never run: the fence
# pattern only matched ``` at the start of a line.
def test_every_python_block_is_found_with_its_output():
    found = list(check_examples.blocks(PAGE))
    assert found == [
        ("x = 2\nprint(x + 1)\n", "3\n", 3),
        ("print(x * 10)\n", "21\n", 14),
        ('print("tilde")\n', None, 22),
    ]


def test_a_page_fails_where_it_prints_other_than_it_shows(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    ran, failures = check_examples.check_page(page)
    assert ran == 3
    assert len(failures) == 1
    assert "page.md:14: printed\n20\n" in failures[0] and "but the page shows\n21" in failures[0]


# A block marked ```py (or pycon, python3) was skipped without a word.
@pytest.mark.parametrize("language", ["py", "pycon", "python3"])
def test_a_python_block_under_another_name_is_refused(language, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\n```{language}\nprint(1)\n```\n")
    ran, failures = check_examples.check_page(page)
    assert ran == 0 and len(failures) == 1
    assert failures[0].endswith(f"page.md: line 3: write ```python, not ```{language}")
