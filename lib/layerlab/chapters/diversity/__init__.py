"""chapters/diversity"""
