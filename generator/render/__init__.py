"""Render: plans into Compose YAML, the Swarm stack and launcher scripts through templates/."""
